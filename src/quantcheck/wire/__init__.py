"""The HTTP client and every server dialect (requests out, answers normalized).
Imports store and errors."""
