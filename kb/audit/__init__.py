"""Audit: compare the pinned sources with upstream and the notes with the claims.

Git and HTTP backends, arXiv and web checks, change classification, the
committed audit state, the report, web-page recording and note coverage.
Imports `kb.records` and `kb.pinned`; the index reads its committed state.
"""
