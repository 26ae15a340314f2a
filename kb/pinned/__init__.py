"""Pinned text: reading sources at their full-SHA pins.

Git blobs at a commit, Markdown note sections and their hashes, and the
authoring helper that prints what an anchor must record. Imports only
`kb.records`.
"""
