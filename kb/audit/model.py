"""The records an audit produces: one finding per checked (or uncheckable) anchor.

A finding says what happened to one claim's anchor between its pin and the
head it was compared with. `drifted` means anything differs from the pin at
head (moved lines included); `stale` means the content the claim rests on
changed or vanished, so the claim's status becomes stale. A finding that could
not be checked is `unchecked`, never `unchanged`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kb.audit.state import RELOCATED, STALE
from kb.records.models import Anchor, Source

# Statuses, by what they mean for the claim (defined with the committed record, kb.audit.state).
FRESH = {"unchanged"}
# RELOCATED: the cited text survived, only its address changed: drift to re-pin, never stale.
# STALE: the cited content changed, vanished, or was never what the anchor says: stale when the
# pin tracks, information when the pin is a fixed historical revision.
UNCHECKED = "unchecked"
NOT_AUDITABLE = "not-auditable"

# How many lines of unified diff a finding carries ("a short diff", not the file).
MAX_DIFF_LINES = 40


@dataclass
class Finding:
    """What the audit found for one anchor (or one source, when claim_id is None)."""

    source: str
    kind: str
    status: str
    detail: str = ""
    claim_id: str | None = None
    anchor: int | None = None
    pin: str | None = None
    head: str | None = None
    path: str | None = None
    lines: list[int] | None = None
    heading: str | None = None
    proposal: dict[str, Any] | None = None
    diff: str | None = None
    # An unchecked finding whose only cause is --offline (network needed): accepted by the user.
    offline: bool = False
    carried_from: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def drifted(self) -> bool:
        """Anything differs from the pin at head."""
        return self.status in RELOCATED or self.status in STALE

    @property
    def stale(self) -> bool:
        """The cited content changed (stales the claim when the pin tracks; see kb.audit.state)."""
        return self.status in STALE

    def where(self) -> str:
        """Short text naming the anchor: source@pin path:lines or #heading."""
        out = self.source
        if self.pin:
            out += f"@{self.pin[:10]}"
        if self.path:
            out += f" {self.path}"
        if self.lines:
            out += f":{self.lines[0]}-{self.lines[1]}"
        if self.heading:
            out += f"#{self.heading}"
        return out

    def to_json(self) -> dict[str, Any]:
        """A plain dict, with the derived flags, for --json and .kb/audit-full.json."""
        # `is` tests: anchor index 0 and empty strings are data, not absence.
        data = {k: v for k, v in asdict(self).items() if not (v is None or v is False or v == {})}
        data["drifted"] = self.drifted
        data["stale"] = self.stale
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        """Inverse of to_json (derived flags dropped)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class AnchorRef:
    """One claim's anchor, with its position in the claim."""

    claim_id: str
    index: int
    anchor: Anchor

    def finding(self, kind: str, status: str, detail: str = "", **kw: Any) -> Finding:
        """A finding for this anchor, pre-filled with its address."""
        a = self.anchor
        return Finding(source=a.source, kind=kind, status=status, detail=detail, claim_id=self.claim_id,
                       anchor=self.index, path=a.path, lines=list(a.lines) if a.lines else None,
                       heading=a.heading, **kw)


class Unchecked(Exception):
    """A check could not run; `offline` when the only reason is that the network was off-limits."""

    def __init__(self, reason: str, offline: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offline = offline


def short_diff(lines: list[str]) -> str:
    """Cut a unified diff to MAX_DIFF_LINES lines, saying how much was left out."""
    if len(lines) <= MAX_DIFF_LINES:
        return "\n".join(lines)
    return "\n".join([*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)"])


class RepoSide:
    """What every repository backend tracks for one source: the head it compares against, and notes."""

    def __init__(self, source: Source, *, offline: bool, ref: str | None) -> None:
        self.source = source
        self.offline = offline
        self.ref = ref
        self.head = ""
        self.head_ref = ""
        self.notes: list[str] = []
        # Set when online but the refresh failed: head is only what was cached locally.
        self.stale_head: str | None = None
