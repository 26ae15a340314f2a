"""Records: the claim and source files turned into validated, line-located models.

Owns the controlled vocabularies, the pydantic models, line-aware YAML
reading, the loader and the cross-record integrity rules. Imports nothing
else from kb: every later stage builds on these records.
"""
