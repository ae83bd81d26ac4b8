"""The HTTP client and every server dialect (requests out, answers normalized).
What it may import: the layer map in docs/development.md."""
