"""Files on disk and their typed records: run and report directories, prompt sets,
suites, rubrics, reviews, token columns, shards, safe writes, redaction. What it may
import: the layer map in docs/development.md."""
