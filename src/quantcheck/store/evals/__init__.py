"""Eval harnesses' logs (lm-evaluation-harness, Inspect AI, Every Eval Ever), read and written."""
