"""Verdict rules shared by the GPU verifiers (torch-free): what a finite number of runs can and cannot show.

- Absence is not proof: when the only unmet expectations ask for at least two distinct results
  (nondeterminism) and every run agreed, the verdict is inconclusive, not refuted.
- A spread is not a point: a timed result is judged at its median and at both ends of its run-to-run
  spread; an answer that changes within the spread is inconclusive.
"""

from __future__ import annotations

from typing import Any

from kb.expect import compare, judge
from kb.models import Comparison
from kb.registry import Context, Outcome


def _rules(ctx: Context) -> dict[str, Comparison]:
    return {k: Comparison.model_validate(v) for k, v in ctx.expect.items()}


def _holds(value: Any, rule: Comparison) -> bool:
    return value is not None and compare(value, rule)[0]


def judge_absence(out: Outcome, ctx: Context, runs: int, what: str = "difference") -> Outcome:
    """Set out's verdict; an unmet `distinct_* >= 2` alone gives inconclusive (N agreeing runs prove no order)."""
    expect = _rules(ctx)
    values = {k: v[0] for k, v in out.measurements.items()}
    verdict, reason = judge(values, expect)
    failing = [k for k, c in expect.items() if not _holds(values.get(k), c)]
    if verdict == "refutes" and failing and all(k.startswith("distinct_") and (expect[k].at_least or 0) >= 2
                                                 for k in failing):
        verdict = "inconclusive"
        reason = f"no {what} seen in {runs} runs ({reason}); absence in finite runs is not proof"
    out.verdict, out.reason = verdict, reason
    return out


def judge_spread(out: Outcome, ends: dict[str, tuple[float, float]], ctx: Context) -> Outcome:
    """Judge at the median, then at both ends of the spread: a verdict that flips within it is inconclusive."""
    expect = _rules(ctx)
    if not expect:
        return out
    values = {k: v[0] for k, v in out.measurements.items()}
    verdict, reason = judge(values, expect)
    flips = [k for k in expect if k in ends and len({_holds(x, expect[k]) for x in (*ends[k], values[k])}) > 1]
    if verdict in ("supports", "refutes") and flips:
        k = flips[0]
        reason = (f"{k}: the median gives '{verdict}' but the run-to-run spread "
                  f"[{ends[k][0]:.4g}, {ends[k][1]:.4g}] lies partly inside and partly outside the expectation")
        verdict = "inconclusive"
    out.verdict, out.reason = verdict, reason
    return out
