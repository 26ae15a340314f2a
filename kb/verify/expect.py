"""Compare measurements with a check's expectation."""

from __future__ import annotations

import math
from typing import Any

from kb.records.models import Comparison


def compare(value: Any, rule: Comparison) -> tuple[bool, str]:
    """Whether `value` satisfies `rule`, and a sentence saying how."""
    if rule.is_ is not None:
        return bool(value) is rule.is_ and isinstance(value, bool), f"{value} (expected {rule.is_})"
    if rule.equals is not None:
        ok = value == rule.equals
        if not ok and isinstance(value, float) and isinstance(rule.equals, int | float):
            ok = math.isclose(value, rule.equals, rel_tol=1e-12, abs_tol=1e-12)
        return ok, f"{value} (expected {rule.equals})"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False, f"{value!r} is not a number"
    if rule.approx is not None:
        rel = rule.rel if rule.rel is not None else 0.0
        tol = max(rel * abs(rule.approx), rule.abs or 0.0)
        if rule.rel is None and rule.abs is None:
            tol = 1e-9 * max(1.0, abs(rule.approx))
        return abs(value - rule.approx) <= tol, f"{value:g} (expected {rule.approx:g} ± {tol:g})"
    if rule.at_most is not None:
        return value <= rule.at_most, f"{value:g} (expected ≤ {rule.at_most:g})"
    if rule.at_least is not None:
        return value >= rule.at_least, f"{value:g} (expected ≥ {rule.at_least:g})"
    lo, hi = rule.between  # type: ignore[misc]
    return lo <= value <= hi, f"{value:g} (expected in [{lo:g}, {hi:g}])"


def judge(measurements: dict[str, Any], expect: dict[str, Comparison]) -> tuple[str, str]:
    """Verdict and reason from every expectation; a missing measurement is a harness error."""
    if not expect:
        return "error", "the check states no expectation, so nothing can support or refute the claim"
    parts, failed = [], []
    for name, rule in expect.items():
        if name not in measurements:
            return "error", f"the verifier did not measure {name!r}"
        ok, text = compare(measurements[name], rule)
        parts.append(f"{name} = {text}")
        if not ok:
            failed.append(f"{name} = {text}")
    if failed:
        return "refutes", "; ".join(failed)
    return "supports", "; ".join(parts)
