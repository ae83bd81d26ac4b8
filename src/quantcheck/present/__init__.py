"""What a person reads: the review sheet and its templates, the review server, the
determinism page, the serving matrix, the English sentences; offline. What it may import:
the layer map in docs/development.md."""
