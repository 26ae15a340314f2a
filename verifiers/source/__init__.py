"""Checks that read the pinned sources: cited lines and their tokens, commit metadata, syntax-tree structure."""
