"""Offline judging, files in and numbers out: sides, pairs (one_pair: one prompt), triage,
expects, the code sandbox, the summary's totals, statistics, teacher-forced figures,
routing, determinism, serving cells, chat templates, tokenizer agreement, log
signatures, approvals, the judge's grades and its agreement with reviewers.
Imports store and errors; never the network, never rendering."""
