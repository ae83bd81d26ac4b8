"""Files on disk and their typed records, a package for each kind: inputs/ (what a user
writes for quantcheck to read), records/ (typed records and their formats), folders/ (runs,
reports and the other folders on disk), evals/ (eval harnesses' logs); at the top what
they share: engine profiles, safe writes, redaction, labels, the shipped schemas/. What it
may import: the layer map in docs/development.md."""
