"""The last audit's drift findings, as the status derivation reads them.

`kb audit` writes a compact, committed summary to `evidence/audit/latest.json`
(stale claims and per-pin counts), so STATUS.md and the site are a function of
the files in git; the full findings go to `.kb/audit-full.json` (a local
cache). A claim whose cited source drifted is stale until its anchors are
re-pinned. Kept apart from `kb.audit` so that status derivation does not
import the audit machinery.
"""

from __future__ import annotations

import json
from pathlib import Path


def drift_path(root: Path) -> Path:
    """Where the last audit's committed summary lives."""
    return root / "evidence" / "audit" / "latest.json"


def full_path(root: Path) -> Path:
    """Where the last audit's full findings live (local, ignored by git)."""
    return root / ".kb" / "audit-full.json"


def load_drift(root: Path) -> dict[str, str]:
    """claim id -> reason, for every claim the last audit found drifted."""
    path = drift_path(root)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return {cid: reason for cid, reason in data.get("stale_claims", {}).items()}
