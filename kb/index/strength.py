"""Evidence strength: how strongly a run could have disagreed with the note it checks.

Decided by rule from the check (its verifier, where the inputs come from, what
is compared) and the run (the hardware it ran on), never typed by hand:

- `measured`: a GPU experiment on real hardware;
- `derived`: a value computed independently of the note's wording: the pinned
  code compiled or executed (`code.*`), the compiler's own output
  (`toolchain.compile`), an fp64 computation whose result is compared with
  the statement's number (a tile count, an order dependence), or the
  statement's own formula evaluated against an independent definition
  (`math.identity`), or a structural query over the pinned file's syntax tree
  (`source.structure`: a call inside a loop or branch, an order, an argument);
- `cited`: the pinned text (or its git metadata) contains what is claimed;
- `restated`: arithmetic whose inputs all come from the statement or from
  constants the KB typed (`arith.eval`), a hand re-statement of pinned code
  (`heuristic.num-splits`), or an fp64 identity built into the verifier that
  only reports an error bound (it cannot read the statement's formula).

A verdict carries the strongest grade among the runs that decide it.
"""

from __future__ import annotations

from typing import Any

GRADES: tuple[str, ...] = ("measured", "derived", "cited", "restated")  # strongest first

# Measurements that only bound the error of a built-in identity: such a check agrees with any
# note that names the identity, whatever formula the note writes.
_ERROR_BOUNDS = {"max_abs_err", "max_rel_err"}


def grade(spec: Any, expect: dict[str, Any], hardware_class: str) -> tuple[str, str]:
    """The grade of one run of a check, and the rule that gave it."""
    if spec is None:
        return "restated", "verifier no longer exists"
    if spec.is_gpu and hardware_class != "cpu":
        return "measured", f"GPU experiment on {hardware_class}"
    if spec.kind == "pinned-code":
        return "derived", "the pinned code compiled or executed"
    if spec.id == "toolchain.compile":
        return "derived", "the compiler's own output"
    if spec.id == "source.structure":
        return "derived", "a query over the pinned file's syntax tree"
    if spec.kind == "source-check":
        return "cited", "the pinned text contains what is claimed"
    if spec.id == "math.identity":
        return "derived", "the statement's own formula evaluated in fp64 against an independent definition"
    if spec.id.startswith("math.") and set(expect) - _ERROR_BOUNDS:
        return "derived", "an fp64 computation compared with the statement's number"
    if spec.id.startswith("math."):
        return "restated", "an identity built into the verifier, bounded in fp64"
    if spec.id == "heuristic.num-splits":
        return "restated", "the KB's hand re-statement of the pinned rule"
    return "restated", "arithmetic over the statement's numbers or the KB's own constants"


def strongest(grades: list[str]) -> str | None:
    """The strongest of the given grades (None for none)."""
    return min(grades, key=GRADES.index) if grades else None
