"""Files on disk and their typed records: run and report directories, prompt sets,
suites, rubrics, reviews, token columns, shards, safe writes. Imports only errors."""
