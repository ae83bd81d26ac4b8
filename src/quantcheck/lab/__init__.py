"""The built-in local endpoints (scripted answers or a real small model) and the demo.
Imports store and errors; only the CLI imports it."""
