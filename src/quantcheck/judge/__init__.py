"""Offline judging, files in and numbers out: sides, pairs (one_pair: one prompt), triage,
expects, sandbox, summary, statistics, drift, routing, determinism, cells, tokenizer
agreement, log signatures, approvals.
Imports store and errors; never the network, never rendering."""
