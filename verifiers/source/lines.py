"""Source checks: the cited lines at the pinned SHA hash as recorded and hold the cited tokens.

The file is read from a local clone when one is configured; with `kb verify
--online` (KB_ONLINE=1) a GitHub-hosted file is fetched once per (SHA, path)
from raw.githubusercontent.com and kept in `.kb/http-cache/raw/` — content at a
full SHA never changes, so the cache never needs revalidating.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kb.gitsrc import GitRepo
from kb.notes import lines_sha256
from kb.registry import Context, Outcome, Params, Requirements, verifier


class FetchError(RuntimeError):
    """The file could not be fetched: a harness problem, never evidence about the claim."""


def fetch_raw(repo_url: str, sha: str, path: str) -> bytes | None:
    """File bytes at a commit from GitHub's raw host (cached on disk); None when it does not exist."""
    import requests

    slug = repo_url.removeprefix("https://github.com/").strip("/")
    if not slug or slug == repo_url:
        raise FetchError(f"{repo_url} is not a GitHub repository; configure a local clone")
    root = (Path(os.environ.get("KB_HTTP_CACHE", ".kb/http-cache")) / "raw").resolve()
    cache = (root / slug / sha / path).resolve()
    if not re.fullmatch(r"[0-9a-f]{40}", sha) or not cache.is_relative_to(root):
        raise FetchError(f"{path!r} at {sha!r} would leave the cache folder; anchors name repository-relative paths")
    if cache.exists():
        return cache.read_bytes()
    base = os.environ.get("KB_RAW_BASE", "https://raw.githubusercontent.com").rstrip("/")
    try:
        resp = requests.get(f"{base}/{slug}/{sha}/{path}", timeout=float(os.environ.get("KB_HTTP_TIMEOUT", "20")))
    except requests.RequestException as exc:
        raise FetchError(f"fetching {path} at {sha[:12]} failed: {exc}") from exc
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise FetchError(f"fetching {path} at {sha[:12]} answered HTTP {resp.status_code}")
    expected = resp.headers.get("Content-Length")
    if expected is not None and int(expected) != len(resp.content):
        raise FetchError(f"fetching {path} at {sha[:12]} returned a truncated body")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(resp.content)
    return resp.content


class SourceLinesParams(Params):
    """Which anchor of the claim to read, and what must (not) be in it."""

    anchor: int
    tokens: list[str]
    absent: list[str] = []
    # Where a statement asserts an order (one call before another, a branch before its alternative),
    # the tokens must occur in this order, each after the end of the previous one.
    ordered: bool = False
    # Regular expressions that must match the cited text, e.g. one that includes the asserted value
    # ("kBlockM\s*=\s*128"), so a token set that also fits the alternative is not enough.
    patterns: list[str] = []


@verifier("source.lines", kind="source-check", params=SourceLinesParams,
          requires=Requirements(git_source=True, online_fallback=True), timeout_s=30)
def source_lines(p: SourceLinesParams, ctx: Context) -> Outcome:
    """Read the anchored span from a local clone and compare hash and tokens."""
    anchor = ctx.claim["anchors"][p.anchor]
    clone = ctx.clones.get(anchor["source"])
    if clone:
        repo = GitRepo(clone)
        try:
            blob = repo.read(anchor["sha"], anchor["path"])
        finally:
            repo.close()
    elif os.environ.get("KB_ONLINE"):
        src = ctx.sources[anchor["source"]]
        blob = fetch_raw(src.get("url") or src.get("repo") or "", anchor["sha"], anchor["path"])
    else:
        return Outcome(verdict="skipped", reason=f"no local clone of {anchor['source']} configured (offline)")
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
    if p.ordered and not missing:
        pos = 0
        for t in p.tokens:
            at = text.find(t, pos)
            if at < 0:
                missing.append(f"{t} (after {p.tokens[p.tokens.index(t) - 1]!r})")
                break
            pos = at + len(t)
    missing += [f"/{pat}/" for pat in p.patterns if not re.search(pat, text, flags=re.MULTILINE)]
    present = [t for t in p.absent if t in text]
    ok = hash_ok and not missing and not present
    if ok:
        reason = (f"lines {start}-{end} of {anchor['path']} hash as recorded and contain "
                  f"{', '.join(map(repr, p.tokens))}{' in this order' if p.ordered else ''}"
                  + (f" and match {', '.join(f'/{x}/' for x in p.patterns)}" if p.patterns else ""))
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
