"""Compare measurements with a check's expectation; re-derive a stored run's verdict from what it measured."""

from __future__ import annotations

import importlib
import inspect
import math
import re
from typing import Any

from kb.records.models import Comparison

# How the worker writes a float it cannot put in JSON (kb.verify.worker._jsonable: str(value)).
_NON_FINITE_TEXT = frozenset({"nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity"})


def is_non_finite(value: Any) -> bool:
    """None, NaN or infinity (as a float, or as the string the worker stores for one); -0.0 is finite."""
    if value is None:
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        return value.strip().lower() in _NON_FINITE_TEXT
    return False


def non_finite_fields(measurements: dict[str, Any], limit: int = 10_000) -> list[str]:
    """Where a run's measurements hold null, NaN or infinity: `measurements.<name>.value[3]`, ...

    Accepts Measurement records or plain `{"value": ..., "unit": ...}` dicts. Lists and mappings
    inside a value are searched too (at most `limit` elements, so a huge value costs bounded time).
    """
    out: list[str] = []
    budget = [limit]

    def walk(v: Any, where: str) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if is_non_finite(v):
            out.append(where)
        elif isinstance(v, list | tuple):
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]")
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{where}.{k}")

    for name, m in measurements.items():
        value = m.get("value") if isinstance(m, dict) else getattr(m, "value", None)
        walk(value, f"measurements.{name}.value")
    return out


def _fmt(value: Any) -> str:
    """A number as short text; never raises (an int too large for a float is shown by its size)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**300:
        return f"an integer of {value.bit_length()} bits"
    try:
        return f"{value:g}"
    except (TypeError, ValueError, OverflowError):
        return repr(value)[:80]


def _finite_number(value: Any) -> bool:
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            return False
        return True
    return isinstance(value, float) and math.isfinite(value)


def compare(value: Any, rule: Comparison) -> tuple[bool, str]:
    """Whether `value` satisfies `rule`, and a sentence saying how.

    Judged by value: -0.0 compares as 0.0. Null, NaN and infinity (and the strings the worker
    stores for them) never satisfy anything: they are not a measurement of what was asked.
    """
    if is_non_finite(value):
        return False, f"{value!r} is not a finite number"
    if rule.is_ is not None:
        return bool(value) is rule.is_ and isinstance(value, bool), f"{value} (expected {rule.is_})"
    if rule.equals is not None:
        ok = value == rule.equals
        if not ok and isinstance(value, float) and isinstance(rule.equals, int | float):
            ok = math.isclose(value, rule.equals, rel_tol=1e-12, abs_tol=1e-12)
        return ok, f"{str(value)[:200]} (expected {rule.equals})"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False, f"{str(value)[:80]!r} is not a number"
    if not _finite_number(value):
        return False, f"{_fmt(value)} is beyond the range of a float"
    if rule.approx is not None:
        rel = rule.rel if rule.rel is not None else 0.0
        tol = max(rel * abs(rule.approx), rule.abs or 0.0)
        if rule.rel is None and rule.abs is None:
            tol = 1e-9 * max(1.0, abs(rule.approx))
        return abs(float(value) - rule.approx) <= tol, f"{_fmt(value)} (expected {rule.approx:g} ± {tol:g})"
    if rule.at_most is not None:
        return value <= rule.at_most, f"{_fmt(value)} (expected ≤ {rule.at_most:g})"
    if rule.at_least is not None:
        return value >= rule.at_least, f"{_fmt(value)} (expected ≥ {rule.at_least:g})"
    lo, hi = rule.between  # type: ignore[misc]
    return lo <= value <= hi, f"{_fmt(value)} (expected in [{lo:g}, {hi:g}])"


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


# ------------------------------------------------------------------ re-deriving a stored verdict

DISAGREES = "stored verdict disagrees with its measurement"


_RULES: dict[str, dict[str, Comparison] | None] = {}


def recorded_expectation(expect: dict[str, Any]) -> dict[str, Comparison] | None:
    """A run's recorded expectation as rules; None when it is not a valid expectation.

    Thousands of runs record the same few hundred expectations: each is validated once (the rules
    are read, never changed).
    """
    try:
        key: str | None = repr(expect)  # records are read from JSON with sorted keys: equal rules, equal text
    except RecursionError:
        key = None
    if key is not None and key in _RULES:
        return _RULES[key]
    try:
        rules: dict[str, Comparison] | None = {str(k): Comparison.model_validate(v) for k, v in expect.items()}
    except (ValueError, TypeError):
        rules = None
    if key is not None:
        if len(_RULES) > 50_000:
            _RULES.clear()
        _RULES[key] = rules
    return rules


def normal_expectation(expect: dict[str, Comparison]) -> dict[str, dict[str, Any]]:
    """An expectation in the form runs record it (kb.verify.runner), as read back from JSON, for comparing."""
    return {k: v.model_dump(mode="json", by_alias=True, exclude_none=True) for k, v in expect.items()}


def rederive(verdict: str, measurements: dict[str, Any], expect: dict[str, Any], own_verdict: bool) -> str | None:
    """Why a stored verdict cannot be trusted given what the run measured; None when it is consistent.

    The verdict is judged again from the recorded measurements and the recorded expectation.
    A stored "supports" that the expectation does not give is never trusted. A stored "refutes"
    whose measurements satisfy the expectation is not trusted either, unless the verifier decides
    its own verdict (`own_verdict`): such a verifier may be stricter than the plain expectation
    (an answer that flips within the run-to-run spread, cited lines that no longer hash), never
    more lenient. A verifier that decides its own verdict against no stated expectation (source.lines)
    leaves nothing to re-derive.
    """
    if verdict not in ("supports", "refutes"):
        return None
    rules = recorded_expectation(expect)
    if rules is None:
        return f"{DISAGREES}: its recorded expectation is not a valid expectation"
    if own_verdict and not rules:
        return None
    values = {k: (m.get("value") if isinstance(m, dict) else getattr(m, "value", None)) for k, m in measurements.items()}
    got, why = judge(values, rules)
    if verdict == "supports" and got != "supports":
        return f"{DISAGREES}: stored 'supports', but its measurements give '{got}' ({why[:300]})"
    if verdict == "refutes" and got == "supports" and not own_verdict:
        return f"{DISAGREES}: stored 'refutes', but its measurements satisfy the expectation ({why[:300]})"
    return None


# ------------------------------------------------------------------ which verifiers decide their own verdict

_OWN: dict[str, bool] = {}
# An Outcome made with a verdict, or a verdict set on one: `Outcome(..., verdict=...)`, `out.verdict = ...`.
_SETS_VERDICT = re.compile(r"\bverdict\s*(?:,\s*[\w.\[\]]+\s*)*=(?!=)")
_PASSIVE = re.compile(r"""\bverdict\s*=\s*["'](skipped|error)["']""")


def decides_own_verdict(spec: Any) -> bool:
    """Whether a verifier may return its own supports/refutes/inconclusive instead of the plain expectation's.

    Declared with `@verifier(..., own_verdict=True/False)`; a verifier that does not declare it is
    read from the code its hash covers (its module and the `verifiers.*` modules it references):
    any verdict it sets other than "skipped"/"error" counts. Erring towards "decides its own" only
    spares a stored "refutes" from re-derivation; a stored "supports" is re-derived either way.
    """
    declared = getattr(spec, "own_verdict", None)
    if declared is not None:
        return bool(declared)
    name = spec.func.__module__
    if name not in _OWN:
        _OWN[name] = any(_sets_verdict(src) for src in _sources(name, spec.func.__qualname__))
    return _OWN[name]


def _sets_verdict(src: str) -> bool:
    for line in src.splitlines():
        code = line.split("#", 1)[0]
        if _SETS_VERDICT.search(code) and not (_PASSIVE.search(code) and code.count("verdict") == 1):
            return True
    return False


def _sources(name: str, qualname: str) -> list[str]:
    """The source of a verifier module and of the package modules its code hash covers (kb.verify.codehash)."""
    from kb.verify.codehash import CodeHasher

    try:
        mods = {name} | {k.split(":", 1)[0] for k in CodeHasher(name.split(".")[0]).parts(name, qualname)
                         if not k.startswith("file:")}
    except (ImportError, OSError, SyntaxError, ValueError):
        mods = {name}
    out = []
    for m in sorted(mods):
        try:
            out.append(inspect.getsource(importlib.import_module(m)))
        except (ImportError, OSError, TypeError):
            continue
    return out
