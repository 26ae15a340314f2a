"""Git metadata of a pinned commit: committer date, subject, author, tags, first parent.

Read with `git log -1` (or `git tag --points-at`) in the local clone of the cited
source; no network. Without a clone the check is skipped, never guessed.
"""

from __future__ import annotations

import subprocess
from typing import Literal

from pydantic import Field

from kb.registry import Context, Outcome, Params, Requirements, verifier

_FORMATS = {"date": "%cd", "subject": "%s", "author": "%an", "parent": "%P"}


class CommitParams(Params):
    """Which commit of which source, and which field of it.

    `anchor` is the index of the claim's repository (or notes) anchor for that
    source; the planner uses it to find the clone. It is read under the name
    `anchor` but kept as `anchor_index` here, since it names a commit-level
    anchor (sha only), not a line span.
    """

    anchor_index: int = Field(alias="anchor")
    source: str
    sha: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    field: Literal["date", "subject", "author", "tag", "parent"]
    abbrev: int | None = None  # truncate a SHA-valued field (parent) to this many characters


def _git(clone: str, *args: str) -> str:
    res = subprocess.run(["git", "-C", clone, *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.strip()[:200]}")
    return res.stdout.strip()


@verifier("source.commit", kind="source-check", params=CommitParams,
          requires=Requirements(git_source=True), timeout_s=30)
def source_commit(p: CommitParams, ctx: Context) -> Outcome:
    """Read one metadata field of a commit from the local clone of its source."""
    anchors = ctx.claim.get("anchors", [])
    if not 0 <= p.anchor_index < len(anchors) or anchors[p.anchor_index].get("source") != p.source:
        return Outcome(verdict="error", reason=f"anchor {p.anchor_index} is not an anchor of source {p.source!r}")
    clone = ctx.clones.get(p.source)
    if not clone:
        return Outcome(verdict="skipped", reason=f"no local clone of {p.source} configured (offline)")
    try:
        full = _git(clone, "rev-parse", "--verify", "--quiet", f"{p.sha}^{{commit}}")
    except RuntimeError:
        return Outcome(measurements={"value": (None, "")}, verdict="refutes",
                       reason=f"commit {p.sha} does not exist in the clone of {p.source}")
    # The commit the check reads must be the one the anchor pins: metadata of another commit says nothing.
    pinned = anchors[p.anchor_index].get("sha") or (ctx.sources.get(p.source) or {}).get("commit")
    if pinned and pinned != full:
        # The check is mis-built (it reads a commit the claim does not pin): no evidence either way.
        return Outcome(verdict="error",
                       reason=f"the check reads {full[:12]}, but anchor {p.anchor_index} pins {pinned[:12]}: "
                              "anchor the commit it reads")
    if p.field == "tag":
        tags = _git(clone, "tag", "--points-at", full).split()
        value: object = tags[0] if len(tags) == 1 else sorted(tags)
    elif p.field == "date":
        value = _git(clone, "log", "-1", "--date=short", "--format=%cd", full)
    else:
        value = _git(clone, "log", "-1", f"--format={_FORMATS[p.field]}", full)
        if p.field == "parent":
            value = str(value).split()[0] if value else ""
            value = value[: p.abbrev] if p.abbrev else value
    return Outcome(measurements={"value": (value, "")}, log=f"{p.field} of {full} in {p.source}: {value!r}")
