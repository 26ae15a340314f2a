"""Verify: turn checks into runs on this machine.

The verifier registry (verifier modules found through the directory it is
given), hardware fingerprint, the plan, worker lanes and the worker process,
expectations, and the append-only evidence files. Imports `kb.records` and
`kb.pinned`, never the index or the exports: `kb verify` works through the
index object it is handed.
"""
