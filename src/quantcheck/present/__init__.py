"""What a person reads: the review sheet and its templates, the review server, the
determinism page, the serving matrix, the English sentences. Imports judge, store and
errors; offline."""
