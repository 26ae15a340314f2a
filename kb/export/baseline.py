"""STATUS.json: the committed verdict of every claim, the baseline `kb verify --fail-on new` compares with.

`kb export status` writes it beside STATUS.md (same index, same moment; `--check` checks both), so the
baseline is always kb's own output, never typed by hand. One overall status per claim, sorted, no
timestamps: a diff of STATUS.json in review shows exactly which verdicts a change moved.

A verdict got worse when a claim is refuted that was not, or a claim that was verified is now
refuted, inconclusive, stale, unverified or needs-hardware. Everything else (a claim added unrefuted,
removed, turned review-only, or moved among the unchecked states) is not a regression.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

NAME = "STATUS.json"
FORMAT = 1


class BaselineError(ValueError):
    """The baseline file cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Regression:
    """One claim whose verdict is worse than the baseline's (`was` is None for a claim the baseline lacks)."""

    claim_id: str
    was: str | None
    now: str

    def __str__(self) -> str:
        """`ID: verified -> refuted`."""
        return f"{self.claim_id}: {self.was or 'not in the baseline'} -> {self.now}"


def current(db: sqlite_utils.Database) -> dict[str, str]:
    """Claim id -> overall status, as the index holds them now."""
    return {r["claim_id"]: r["status"] for r in
            db.query("SELECT claim_id, status FROM status WHERE hardware_class = '*' ORDER BY claim_id")}


def render(db: sqlite_utils.Database) -> str:
    """The text of STATUS.json for the index: deterministic, one claim per line."""
    doc = {"format": FORMAT, "generated_by": "kb export status",
           "what": "overall status per claim; the baseline of `kb verify --fail-on new`",
           "claims": current(db)}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def read(path: Path) -> dict[str, str] | None:
    """The baseline's claim -> status; None when the file does not exist; BaselineError when it is not one."""
    from kb.records.vocab import STATUSES

    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", 1)
        raise BaselineError(f"{path}:{line}: not a kb baseline ({exc}); rewrite it with `kb export status`") from None
    claims = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(claims, dict):
        raise BaselineError(f"{path}:1: field format/claims: not a format-{FORMAT} kb baseline; "
                            "rewrite it with `kb export status`")
    bad = next((k for k, v in claims.items() if v not in STATUSES), None)
    if bad is not None:
        raise BaselineError(f"{path}:1: field claims.{bad}: {claims[bad]!r} is not a status ({', '.join(STATUSES)})")
    return claims


def worse(was: str | None, now: str) -> bool:
    """Whether `now` is a worse verdict than `was` (module docstring)."""
    if now == "refuted":
        return was != "refuted"
    return was == "verified" and now in ("inconclusive", "stale", "unverified", "needs-hardware")


def regressions(baseline: dict[str, str], now: dict[str, str], claim_ids: list[str] | None = None) -> list[Regression]:
    """The claims among `claim_ids` (default: all of `now`) whose verdict is worse than the baseline's."""
    ids = sorted(now) if claim_ids is None else sorted(set(claim_ids) & set(now))
    return [Regression(cid, baseline.get(cid), now[cid]) for cid in ids if worse(baseline.get(cid), now[cid])]
