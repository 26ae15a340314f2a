"""Export: publish the index as STATUS.md, a static site and PROV-JSON.

Reads the index only (never the YAML files or the evidence directly).
"""
