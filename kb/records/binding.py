"""Binding: every number a statement states is tied to a check, so the two cannot drift apart.

A number in a claim's statement is bound when a check reproduces it, by role:
an expected value (`equals`, `approx`, bounds), a numeric parameter the check
consumes (a shape, a grid point; not an anchor index), a literal in an
expression kb's safe evaluators compute (arith, math.identity, a rule), or the
value of a hardware constant such an expression names (`H100.sm_count`).
A standalone number in a token a source check requires in the pinned lines
binds (the pinned source states it). Digits inside code text (C++ values and
calls, preludes, snippet names), regexes and identifiers bind nothing. A number that is a
condition rather than a result is declared in `givens` and must be consumed by
a check parameter (`"$name"`), so a given no check reads binds nothing. A
number that names rather than measures (a section, a step, a year) is listed,
exactly as written, in `labels`.
Units are matched as written: 128 KiB binds 131072 bytes; 36% binds 0.36.

Claims without checks (review-only, waiting for hardware) are not bound:
there is nothing to tie their numbers to, and their status never says verified.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A number standing alone (not part of a name like FA2, sm_90, v2.0.0 or m16n8k16), with an optional unit.
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?!\.\d)"
                    r"(?:\s*(KiB|MiB|GiB|KB|MB|GB|K|M|%|x|×)(?![A-Za-z]))?(?![\w])")
_SCALE = {None: [1.0], "KiB": [1024.0], "MiB": [1024.0**2], "GiB": [1024.0**3], "KB": [1e3, 1024.0],
          "MB": [1e6, 1024.0**2], "GB": [1e9, 1024.0**3], "K": [1e3, 1024.0], "M": [1e6, 1024.0**2],
          "%": [0.01, 1.0], "x": [1.0], "×": [1.0]}
GIVEN_REF = re.compile(r"^\$([A-Za-z_]\w*)$")
# A given may be an input from a claim this one depends on: "@<claim id>#<measurement>" is that
# measurement of the claim's latest supporting run, resolved when the check is planned.
UPSTREAM = re.compile(r"^@([a-z0-9][a-z0-9.-]*)#([A-Za-z_]\w*)$")


def upstream_inputs(givens: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Given name -> (claim id, measurement) for every given that reads a dependency's result."""
    return {name: (m.group(1), m.group(2)) for name, v in givens.items()
            if isinstance(v, str) and (m := UPSTREAM.match(v))}


@dataclass(frozen=True)
class Unbound:
    """A statement number no check reproduces."""

    text: str
    value: float


def statement_numbers(statement: str) -> list[tuple[str, float, str | None]]:
    """(as written, value, unit) for every standalone number in a statement.

    "41,600" is one number; inside brackets ("O[64,128]", "(0,1)") a comma separates numbers.
    """
    out = []
    matches = list(NUMBER.finditer(statement))
    for i, m in enumerate(matches):
        before = statement[m.start() - 1] if m.start() else ""
        after = statement[m.end(1)] if m.end(1) < len(statement) else ""
        if "," in m.group(1) and before and before in "[(" and after and after in "])":
            out += [(part, float(part), None) for part in m.group(1).split(",")]
            continue
        unit = m.group(2)
        # "80-90%": the range's first end is a percentage too ("%" still admits the bare number).
        nxt = matches[i + 1] if i + 1 < len(matches) else None
        if unit is None and nxt is not None and nxt.group(2) == "%" and statement[m.end():nxt.start()] in ("-", "–"):
            unit = "%"
        out.append((m.group(0).strip(), float(m.group(1).replace(",", "")), unit))
    return out


# Binding by role: which parameters may bind a statement number. Numbers a check consumes bind (shapes, grid
# points, block sizes), except anchor indices; text binds only where kb's own safe evaluators read it as
# arithmetic (arith expressions and lets, math.identity steps, a rule). Digits in code text (C++ values, calls,
# preludes, snippet names), in tokens and regexes searched for, in identifiers (functions, kernel filters,
# impl, arch, dtype) and in flags bind nothing: they coincide with statement numbers without reproducing them.
NON_BINDING_NUMBERS = frozenset({"anchor"})
EXPRESSION_KEYS = frozenset({"expr", "let", "rule", "lhs", "rhs", "do", "steps", "formula", "define", "where"})
# Tokens a source check requires in the cited pinned lines state the number in the pinned source itself:
# a standalone number in them binds (not digits inside names such as sm_90 or kHeadDim128).
SOURCE_TEXT_KEYS = frozenset({"tokens"})


_PLAIN_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?![\w.])")
_C_LITERAL = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)[fFuUlL]*(?![\w.])")


def _collect(obj: Any, out: set[float], texts: list[str], constants: Mapping[str, Mapping[str, Any]],
             key: str | None = None, expression: bool = False) -> None:
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, int | float):
        if math.isfinite(obj) and key not in NON_BINDING_NUMBERS:
            out.add(float(obj))
        return
    if isinstance(obj, str):
        texts.append(obj)
        if not (expression or key in EXPRESSION_KEYS or key in SOURCE_TEXT_KEYS):
            return
        # In pinned source text a C literal counts with its suffix (1.f, 128u, 2.0e-3f).
        pattern = _C_LITERAL if key in SOURCE_TEXT_KEYS and not expression else _PLAIN_NUMBER
        for m in pattern.finditer(obj):
            out.add(float(m.group(1)))
        for m in re.finditer(r"\b([A-Za-z]\w*)\.(\w+)\b", obj):
            v = constants.get(m.group(1), {}).get(m.group(2))
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.add(float(v))
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _collect(v, out, texts, constants, str(k), expression or str(k) in EXPRESSION_KEYS)
        return
    if isinstance(obj, Iterable):
        for v in obj:
            _collect(v, out, texts, constants, key, expression)


def consumed_givens(checks: list[Any]) -> set[str]:
    """Names of givens that some check parameter references as "$name"."""
    names: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, str) and (m := GIVEN_REF.match(obj)):
            names.add(m.group(1))
        elif isinstance(obj, Mapping):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list | tuple):
            for v in obj:
                walk(v)

    for ch in checks:
        walk(ch.params)
    return names


def bound_values(claim: Any, constants: Mapping[str, Mapping[str, Any]]) -> set[float]:
    """Every number the claim's checks reproduce or consume."""
    out: set[float] = set()
    texts: list[str] = []
    for ch in claim.checks:
        _collect(ch.params, out, texts, constants)
        # Expected values bind whatever their type: an expected date or subject line states its numbers.
        _collect({k: v.model_dump(by_alias=True, exclude_none=True) for k, v in ch.expect.items()}, out, texts, constants,
                 expression=True)
    used = consumed_givens(claim.checks)
    for name, value in (claim.givens or {}).items():
        if name in used:
            _collect(value, out, texts, constants)
    return out


def unbound_numbers(claim: Any, constants: Mapping[str, Mapping[str, Any]]) -> list[Unbound]:
    """Statement numbers of a checked claim that no check reproduces (empty for claims without checks)."""
    if not claim.checks:
        return []
    vals = bound_values(claim, constants)
    labels = set(claim.labels or [])
    out = []
    for text, value, unit in statement_numbers(claim.statement):
        if text in labels:
            continue
        cands = [value * s for s in _SCALE.get(unit, [1.0])] + [value]
        if not any(math.isclose(c, v, rel_tol=1e-9, abs_tol=1e-12) for c in cands for v in vals):
            out.append(Unbound(text, value))
    return out


def resolve_givens(params: Any, givens: Mapping[str, Any]) -> Any:
    """Params with every "$name" replaced by the claim's given value (what the verifier receives)."""
    if isinstance(params, str) and (m := GIVEN_REF.match(params)):
        if m.group(1) not in givens:
            raise KeyError(m.group(1))
        return givens[m.group(1)]
    if isinstance(params, Mapping):
        return {k: resolve_givens(v, givens) for k, v in params.items()}
    if isinstance(params, list):
        return [resolve_givens(v, givens) for v in params]
    return params
