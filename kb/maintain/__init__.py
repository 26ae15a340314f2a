"""Maintain: workflows that change the records on purpose, above audit and verify.

`kb repin` advances a tracking pin: the audit says which anchors survive, the
verifiers re-check them at the new ref, targeted YAML edits record the result.
Imports every stage below it; nothing imports it but the CLI.
"""
