"""The built-in local endpoints (scripted answers or a real small model) and the demo.
What it may import, and who may import it: the layer map in docs/development.md."""
