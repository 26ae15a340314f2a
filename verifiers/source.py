"""Source checks: the cited lines at the pinned SHA hash as recorded and hold the cited tokens."""

from __future__ import annotations

from kb.gitsrc import GitRepo
from kb.notes import lines_sha256
from kb.registry import Context, Outcome, Params, Requirements, verifier


class SourceLinesParams(Params):
    """Which anchor of the claim to read, and what must (not) be in it."""

    anchor: int
    tokens: list[str]
    absent: list[str] = []


@verifier("source.lines", kind="source-check", params=SourceLinesParams,
          requires=Requirements(git_source=True), timeout_s=30)
def source_lines(p: SourceLinesParams, ctx: Context) -> Outcome:
    """Read the anchored span from a local clone and compare hash and tokens."""
    anchor = ctx.claim["anchors"][p.anchor]
    clone = ctx.clones.get(anchor["source"])
    if not clone:
        return Outcome(verdict="skipped", reason=f"no local clone of {anchor['source']} configured (offline)")
    repo = GitRepo(clone)
    try:
        blob = repo.read(anchor["sha"], anchor["path"])
    finally:
        repo.close()
    if blob is None:
        return Outcome(measurements={"hash_ok": (False, ""), "tokens_found": (False, "")},
                       verdict="refutes", reason=f"{anchor['path']} does not exist at {anchor['sha'][:12]}")
    start, end = anchor["lines"]
    got = lines_sha256(blob, start, end)
    if got is None:
        return Outcome(measurements={"hash_ok": (False, ""), "tokens_found": (False, "")},
                       verdict="refutes", reason=f"lines {start}-{end} run past the end of {anchor['path']}")
    digest, text = got
    hash_ok = digest == anchor.get("sha256")
    missing = [t for t in p.tokens if t not in text]
    present = [t for t in p.absent if t in text]
    ok = hash_ok and not missing and not present
    if ok:
        reason = f"lines {start}-{end} of {anchor['path']} hash as recorded and contain {', '.join(map(repr, p.tokens))}"
    elif not hash_ok:
        reason = f"lines {start}-{end} of {anchor['path']} hash to {digest[:12]}, not the recorded {str(anchor.get('sha256'))[:12]}"
    elif missing:
        reason = f"lines {start}-{end} of {anchor['path']} lack {', '.join(map(repr, missing))}"
    else:
        reason = f"lines {start}-{end} of {anchor['path']} contain {', '.join(map(repr, present))}, which the claim says is absent"
    return Outcome(
        measurements={"hash_ok": (hash_ok, ""), "tokens_found": (not missing and not present, "")},
        verdict="supports" if ok else "refutes", reason=reason, log=text[:2000],
    )
