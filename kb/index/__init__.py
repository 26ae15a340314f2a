"""Index: the SQLite cache of records, runs and derived statuses.

Migrations, the fingerprinted rebuild, status derivation and the queries
behind `kb claims`, `kb show` and `kb search`. Imports `kb.records`,
`kb.verify` (registry and evidence files) and `kb.audit.state` (the committed
drift record).
"""
