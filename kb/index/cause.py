"""Why a claim is refuted or inconclusive: a cause from a fixed vocabulary, by rule or by recorded judgement.

A refutation is a claim about someone's work, so it carries its cause:

- `note` / `deck`: the notes or a slide deck assert what the evidence contradicts (a finding);
- `source`: another source on the notes author's list (a teaching repository's README or code) asserts
  what the evidence contradicts (a finding about that source, not about the notes: not in `kb errata`);
- `not-reproduced`: a figure the source reports for other hardware was not reached here (no finding
  about the source);
- `tie`: the pinned code and the stated rule differ only at an exact numerical tie, which the code
  resolves by its own arithmetic;
- `band-above` / `band-below`: a measurement outside a stated band, with the direction;
- `spread`: (inconclusive only) the verdict flips within the run-to-run or batch-to-batch spread;
- `unbound`: (inconclusive only) the statement states a number no check binds and no measurement reproduces;
- `unreached`: (inconclusive only) a check ran and, by its own account, does not reach what the statement
  asserts (two toolkits that agree bitwise say nothing of a "can differ" statement): the verifier's reason;
- `extraction`: the claim misstates its source (a defect of the KB, never published).

Rules decide where the data allows: a tie by exact rational re-evaluation of the stated rule at the
disagreeing input; not-reproduced from the claim's `scope.reported_on` against the hardware that ran
it. Then the claim's recorded judgement (`cause: {kind, why}`) decides; then a band's direction from
the measured value against the band; without either the cause is `unjudged`, which `kb validate`
reports for every refuted claim.
"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction
from typing import Any

# Causes that are findings about the notes or decks (what `kb errata` publishes).
FINDINGS = frozenset({"note", "deck"})
UNJUDGED = "unjudged"

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg,
        ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}


def _ceil_div(a: Any, b: Any) -> Any:
    return -(-a // b)


_FUNCS = {"min": min, "max": max, "abs": abs, "int": int, "round": round, "ceil_div": _ceil_div,
          "ceil": lambda x: -int(-x // 1), "floor": lambda x: int(x // 1)}


def exact_ties(rule: str, point: dict[str, Any]) -> list[str]:
    """Comparisons (and `max`/`min` choices) of `rule` whose two sides are exactly equal at `point`.

    The rule is evaluated in exact rational arithmetic, as the statement means it; the pinned code
    computes in floating point, so at such an input rounding, not the rule, picks the answer.
    """
    ties: list[str] = []
    # Decimal literals mean their decimal value (0.95 is 19/20, not the nearest double): exact as the statement means it.
    env = {k: (Fraction(str(v)) if isinstance(v, int | float) and not isinstance(v, bool) else v) for k, v in point.items()}

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float | bool):
            return node.value if isinstance(node.value, bool) else Fraction(str(node.value))
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            result = True
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = ev(right_node)
                if isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) and left == right and _inexact(node):
                    ties.append(ast.unparse(node))
                result = result and _OPS[type(op)](left, right)
                left = right
            return result
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Tuple | ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            args = [ev(a) for a in node.args]
            result = _FUNCS[node.func.id](*args)
            # max/min tie only when the chosen value itself occurs twice.
            if node.func.id in ("max", "min") and sum(a == result for a in args) > 1 and _inexact(node):
                ties.append(ast.unparse(node))
            return result
        raise ValueError(f"unsupported syntax {type(node).__name__}")

    try:
        ev(ast.parse(rule, mode="eval"))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
        return []
    return ties


def _inexact(node: ast.AST) -> bool:
    """Whether floating-point code would round here: a true division or a non-integer literal below the node."""
    return any((isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div))
               or (isinstance(n, ast.Constant) and isinstance(n.value, float)) for n in ast.walk(node))


def _value(run: Any, name: str) -> Any:
    m = run.measurements.get(name)
    return m.value if m is not None else None


def _band(run: Any) -> tuple[str, str] | None:
    """(band-above | band-below, why) when a failed expectation is a band or a bound."""
    for name, rule in run.expect.items():
        value = _value(run, name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        between, lo, hi = rule.get("between"), rule.get("at_least"), rule.get("at_most")
        if between:
            lo, hi = between
        elif rule.get("approx") is not None:  # "within ±X of": a band around the stated figure
            x = float(rule["approx"])
            tol = float(rule.get("abs") or 0.0) + abs(x) * float(rule.get("rel") or 0.0)
            if tol > 0:
                lo, hi = x - tol, x + tol
        if hi is not None and value > hi:
            return "band-above", f"{name} = {value:g} lies above the stated {_range(lo, hi)}"
        if lo is not None and value < lo:
            return "band-below", f"{name} = {value:g} lies below the stated {_range(lo, hi)}"
    return None


def _range(lo: Any, hi: Any) -> str:
    if lo is not None and hi is not None:
        return f"band [{lo:g}, {hi:g}]"
    return f"bound {'>= ' + format(lo, 'g') if lo is not None else '<= ' + format(hi, 'g')}"


def _tie(claim: Any, run: Any) -> str | None:
    """Why the run's only disagreement is an exact tie, or None."""
    if _value(run, "disagreements") != 1:
        return None
    first = _value(run, "first_disagreement")
    params = claim.checks[run.check_index].params if run.check_index < len(claim.checks) else {}
    rule = params.get("rule")
    if not isinstance(first, dict) or not isinstance(rule, str) or not isinstance(first.get("input"), dict):
        return None
    ties = exact_ties(rule, first["input"])
    if not ties:
        return None
    point = dict(sorted(first["input"].items()))  # a stable text whatever order the run recorded its keys in
    return (f"the only disagreeing input {point} is an exact tie of the stated rule ({ties[0]}); the pinned "
            f"code's floating-point arithmetic answers {first.get('pinned_code')}, the rule {first.get('rule')}")


def derive(claim: Any, status: str, deciding: list[Any], hardware_class: str) -> tuple[str | None, str | None, str | None]:
    """(cause, why, by) for a refuted or inconclusive status; (None, None, None) otherwise.

    `by` is "rule" or "judgement". `deciding` are the runs behind the status (refuting runs for a
    refutation, inconclusive ones for an inconclusive status).
    """
    if status not in ("refuted", "inconclusive"):
        return None, None, None
    for run in deciding:
        if (why := _tie(claim, run)) is not None:
            return "tie", why, "rule"
    reported_on = getattr(claim.scope, "reported_on", None)
    bands = [b for b in (_band(run) for run in deciding) if b is not None]
    for kind, why in bands:
        if reported_on and reported_on.lower() not in hardware_class.lower() and kind == "band-below":
            return "not-reproduced", f"{why}; the source reports the figure for {reported_on}, this ran on {hardware_class}", "rule"
    # A recorded judgement outranks the band rule: a count's `at_least: 1` missed is a finding about what the
    # source says (note, deck, source), not a measured figure falling short of a stated band.
    judged = getattr(claim, "cause", None)
    if status == "refuted" and judged is not None:
        return judged.kind, judged.why, "judgement"
    for kind, why in bands:
        if status == "refuted":
            return kind, why, "rule"
    if status == "inconclusive":
        judged = getattr(claim, "cause", None)
        if judged is not None:
            return judged.kind, judged.why, "judgement"
        # A verifier that decides its own verdict says why it leaves the statement open; only a run whose
        # reason is the run-to-run spread is a spread (batch splits are caught before this).
        stated = [r for r in deciding if (getattr(r, "reason", None) or "") and "spread" not in r.reason]
        if stated and len(stated) == len(deciding):
            return "unreached", stated[0].reason, "rule"
        return "spread", "the verdict flips within the spread of the runs behind it", "rule"
    judged = getattr(claim, "cause", None)
    if judged is not None:
        return judged.kind, judged.why, "judgement"
    return UNJUDGED, "no rule decides the cause and the claim records no judgement", "rule"
