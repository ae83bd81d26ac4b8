"""Offline judging, files in and numbers out: sides, pairs, triage, expects, sandbox,
summary, statistics, drift, routing, determinism, cells, log signatures, approvals.
Imports store and errors; never the network, never rendering."""
