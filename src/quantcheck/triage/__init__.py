"""Offline triage, files in and numbers out: sides, pairs (one_pair: one prompt), signals,
expects, the code sandbox, the summary's totals, statistics, teacher-forced figures,
routing, determinism, serving cells, chat templates, tokenizer agreement, log
signatures, approvals, the judge's questions and verdicts (judging) and its agreement with
reviewers. What it may import: the layer map in docs/development.md."""
