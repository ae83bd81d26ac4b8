"""Typed records, one JSON shape each, and the formats of the files that hold them."""
