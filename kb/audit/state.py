"""The committed audit record: the carried drift state, as status derivation reads it.

`kb audit` writes `evidence/audit/latest.json`; it is the state carried from
one audit to the next (the full findings with diffs go to `.kb/audit-full.json`,
a local cache nobody relies on). Format 2 holds, per claim, every anchor whose
upstream differs from its pin (source, pin, where, status, the head compared
with, when it was found, and whether it was re-checked), and per source when it
was last checked against which head. Whether an entry stales the claim is not
stored: it follows from the pin's role in `sources/` (tracking pins and notes
stale; fixed pins inform), so changing a role re-derives statuses.

Kept apart from the audit machinery so that status derivation imports only this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = 2
# Finding statuses by what they mean for the claim (kb.audit.model uses the same sets).
RELOCATED = frozenset({"moved", "renamed"})  # the cited text survived; only its address changed
STALE = frozenset({"edited", "deleted", "symbol-elsewhere", "invalid", "new-version", "changed"})


def drift_path(root: Path) -> Path:
    """Where the committed audit record lives."""
    return root / "evidence" / "audit" / "latest.json"


def full_path(root: Path) -> Path:
    """Where the last audit's full findings live (local, ignored by git)."""
    return root / ".kb" / "audit-full.json"


class AuditStateError(ValueError):
    """The committed audit record cannot be read."""


def read_record(root: Path) -> dict[str, Any]:
    """The committed record as a dict (empty when there is none); raises AuditStateError when unreadable."""
    path = drift_path(root)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AuditStateError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AuditStateError(f"{path}: expected an object")
    return data


def load_drift(root: Path) -> dict[str, list[dict[str, Any]]]:
    """claim id -> its drift entries from the committed record.

    A format-1 record (only `stale_claims`: id -> reason) reads as one entry per
    claim with an unknown pin, which derives as stale: an old record never makes
    a claim look fresher than it did.
    """
    data = read_record(root)
    if data.get("format") == FORMAT:
        return {cid: list(entries) for cid, entries in (data.get("drift") or {}).items()}
    return {cid: [{"status": "changed", "legacy_reason": reason}] for cid, reason in (data.get("stale_claims") or {}).items()}


def entry_text(e: Mapping[str, Any]) -> str:
    """One drift entry as a short sentence."""
    if "legacy_reason" in e:
        return str(e["legacy_reason"])
    where = e.get("source", "?")
    if e.get("pin"):
        where += f"@{str(e['pin'])[:10]}"
    if e.get("path"):
        where += f" {e['path']}"
    if e.get("lines"):
        where += f":{e['lines'][0]}-{e['lines'][1]}"
    if e.get("heading"):
        where += f"#{e['heading']}"
    text = f"{where} {e.get('status', '?')} at {str(e.get('head') or 'head')[:12]}"
    if e.get("carried_from"):
        text += f" (found {e['carried_from']}; not re-checked: {e.get('not_rechecked', 'source unavailable')})"
    return text


def split_drift(entries: list[Mapping[str, Any]], role_of: Any) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(entries that stale the claim, entries that are information), by the pin role `role_of(entry)`."""
    stale, info = [], []
    for e in entries:
        if e.get("status") in STALE and ("legacy_reason" in e or role_of(e) == "tracking"):
            stale.append(e)
        else:
            info.append(e)
    return stale, info
