"""Verifier code: functions registered with `kb.verify.registry.verifier`.

Modules here import no heavy packages at module level; torch and friends are
imported inside the verifier functions, which run in worker processes.
"""
