"""What each claim rests on: the state of everything beneath it in the `depends_on` graph.

A claim's own status says what its checks found; this says whether its
premises hold. Following `depends_on` transitively, every reachable claim is
put in a category by its own overall status (verified; refuted; stale;
unchecked = unverified, needs-hardware or inconclusive; review-only). The claim
rests on the worst category reached (refuted > stale > unchecked > review-only
> verified), naming the nearest claim in that category and the chain that
leads there. A claim with no dependencies rests on nothing (None).

Like the blueprints of formal proofs: "locally verified" is the claim's own
status; "verified with all dependencies" is status verified and rests on
verified.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RESTS = ("refuted", "stale", "unchecked", "review-only", "verified")  # worst first
_CATEGORY = {"verified": "verified", "refuted": "refuted", "stale": "stale", "review-only": "review-only",
             "unverified": "unchecked", "needs-hardware": "unchecked", "inconclusive": "unchecked"}


@dataclass(frozen=True)
class Rest:
    """The state beneath one claim."""

    state: str  # one of RESTS
    via: str  # the nearest claim in that state
    path: tuple[str, ...]  # from the claim's direct dependency down to `via`


def category(status: str) -> str:
    """The rests-on category of a claim's own overall status."""
    return _CATEGORY.get(status, "unchecked")


def rests_on(deps: Mapping[str, Sequence[str]], status: Mapping[str, str]) -> dict[str, Rest]:
    """claim id -> Rest, for every claim with at least one (known) dependency."""
    out: dict[str, Rest] = {}
    for cid in deps:
        parent: dict[str, str | None] = {}
        order: list[str] = []
        queue = deque((d, None) for d in deps.get(cid, ()) if d in status and d != cid)
        while queue:
            node, via = queue.popleft()
            if node in parent or node == cid:
                continue
            parent[node] = via
            order.append(node)  # breadth-first: nearest first
            queue.extend((d, node) for d in deps.get(node, ()) if d in status)
        if not order:
            continue
        worst = min(order, key=lambda n: (RESTS.index(category(status[n])), order.index(n)))
        chain = [worst]
        while parent[chain[-1]] is not None:
            chain.append(parent[chain[-1]])  # type: ignore[arg-type]
        out[cid] = Rest(category(status[worst]), worst, tuple(reversed(chain)))
    return out
