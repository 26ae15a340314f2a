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
    """The committed audit record cannot be read; carries the line where the trouble is (1 if unknown)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


MAX_RECORD_BYTES = 64 * 2**20


def read_record(root: Path) -> dict[str, Any]:
    """The committed record as a dict (empty when there is none); raises AuditStateError when unreadable."""
    path = drift_path(root)
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_symlink() or not path.is_file():
        raise AuditStateError("is not a regular file")
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise AuditStateError(f"is larger than {MAX_RECORD_BYTES // 2**20} MiB")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditStateError(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x})", raw[: exc.start].count(b"\n") + 1) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AuditStateError(f"not valid JSON ({exc.msg})", exc.lineno) from None
    except (RecursionError, ValueError) as exc:
        raise AuditStateError(f"not a readable audit record ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise AuditStateError("expected an object")
    data["_text"] = text
    return data


def _line_of(text: str, needle: str) -> int:
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


_ENTRY_TYPES = {"source": str, "status": str, "pin": (str, type(None)), "path": (str, type(None)),
                "heading": (str, type(None)), "head": (str, type(None)), "kind": str, "detail": str,
                "carried_from": str, "not_rechecked": str, "found_at": str}


def load_drift(root: Path) -> dict[str, list[dict[str, Any]]]:
    """claim id -> its drift entries from the committed record; raises AuditStateError on a malformed record.

    A format-1 record (no `format`, only `stale_claims`: id -> reason) reads as one
    entry per claim with an unknown pin, which derives as stale: an old record never
    makes a claim look fresher than it did. Any other shape is refused, never ignored.
    """
    data = read_record(root)
    if not data:
        return {}
    text = data.pop("_text", "")
    fmt = data.get("format")
    if fmt is None:
        stale = data.get("stale_claims")
        if not isinstance(stale, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in stale.items()):
            raise AuditStateError("a record without `format` must hold `stale_claims`: claim id -> reason",
                                  _line_of(text, '"stale_claims"'))
        return {cid: [{"status": "changed", "legacy_reason": reason}] for cid, reason in stale.items()}
    if fmt != FORMAT or isinstance(fmt, bool):
        raise AuditStateError(f"format {fmt!r} is not one this kb reads (format {FORMAT})", _line_of(text, '"format"'))
    drift = data.get("drift", {})
    if not isinstance(drift, dict):
        raise AuditStateError("`drift` must map claim ids to lists of entries", _line_of(text, '"drift"'))
    out: dict[str, list[dict[str, Any]]] = {}
    for cid, entries in drift.items():
        where = _line_of(text, f'"{cid}"')
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise AuditStateError(f"drift of {cid}: expected a list of entries", where)
        for e in entries:
            for key, kind in _ENTRY_TYPES.items():
                if key in e and not isinstance(e[key], kind):
                    raise AuditStateError(f"drift of {cid}: field {key!r} has the wrong type", where)
            if "source" not in e or "status" not in e:
                raise AuditStateError(f"drift of {cid}: an entry needs source and status", where)
            lines = e.get("lines")
            if lines is not None and not (isinstance(lines, list) and len(lines) == 2
                                          and all(isinstance(x, int) and not isinstance(x, bool) for x in lines)):
                raise AuditStateError(f"drift of {cid}: lines must be [start, end]", where)
            if "anchor" in e and not (isinstance(e["anchor"], int) and not isinstance(e["anchor"], bool)):
                raise AuditStateError(f"drift of {cid}: anchor must be an index", where)
        out[cid] = entries
    return out


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
