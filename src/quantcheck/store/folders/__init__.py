"""Folders on disk: runs and reports, references, shards and their merge, reviews, caches."""
