"""`kb sources fetch`: bring the pinned repositories into the project's clone folder, on demand.

Each repository or notes source becomes a bare partial clone (`--filter=blob:none`:
commits and trees now, file contents when a check reads them) at
`<clone cache>/<id>.git`, where the verifiers and the audit look for it. A
pinned commit the clone lacks is fetched by SHA. Running it again only checks
that every pin is present. A source configured in `kb.local.toml` (or
KB_CLONE_<ID>) is left alone: that clone is the user's override. Network
faults are reported per source; the other sources still fetch.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kb.config import Config
from kb.records.models import Source

# Git never prompts (no terminal in CI) and gives up on a dead connection instead of hanging.
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}


@dataclass
class FetchResult:
    """What happened to one source."""

    source: str
    path: str
    action: str  # cloned | updated | present | configured | skipped | failed
    pins: int = 0
    missing: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        """The source's pins are all available locally (or it was deliberately left alone)."""
        return self.action in ("cloned", "updated", "present", "configured", "skipped") and not self.missing


def _git(*args: str, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **_ENV})


def _url(src: Source) -> str | None:
    """Where to clone from: a repository's url, a notes source's repo (URL or local path)."""
    url = src.url if src.kind == "repo" else src.repo
    if not url:
        return None
    if re.match(r"^(https?|file|ssh|git)://", url) or url.startswith("git@"):
        return url
    return url if Path(url).exists() else None


def _has(gitdir: Path, sha: str) -> bool:
    return _git("--git-dir", str(gitdir), "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def fetch_source(cfg: Config, src: Source) -> FetchResult:
    """Clone or update one source so that every pin is present; never raises for network faults."""
    dest = (cfg.clone_cache or cfg.root / ".kb" / "clones") / f"{src.id}.git"
    if src.id in cfg.clones:
        return FetchResult(src.id, cfg.clones[src.id], "configured", detail="kb.local.toml / KB_CLONE_* override")
    url = _url(src)
    if url is None:
        return FetchResult(src.id, str(dest), "skipped", detail="no git URL")
    pins = sorted(src.pinned_shas())
    action = "present"
    if not (dest / "HEAD").exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".partial")
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        res = _git("clone", "--bare", "--quiet", "--filter=blob:none", url, str(tmp))
        if res.returncode != 0:
            return FetchResult(src.id, str(dest), "failed", len(pins), pins, res.stderr.strip()[-300:])
        tmp.rename(dest)  # only a complete clone takes the name the verifiers look for
        action = "cloned"
    missing = [sha for sha in pins if not _has(dest, sha)]
    if missing:
        res = _git("--git-dir", str(dest), "fetch", "--quiet", "--filter=blob:none", "origin", *missing)
        if res.returncode != 0:
            # Servers that refuse fetch-by-SHA still serve the pins through their branches and tags.
            res = _git("--git-dir", str(dest), "fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/heads/*")
        missing = [sha for sha in missing if not _has(dest, sha)]
        if action == "present":
            action = "updated"
        if missing:
            return FetchResult(src.id, str(dest), "failed", len(pins), missing,
                               (res.stderr.strip()[-300:] or "pinned commits not found upstream"))
    return FetchResult(src.id, str(dest), action, len(pins))


def fetch_sources(cfg: Config, sources: dict[str, Source], ids: list[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> list[FetchResult]:
    """Fetch the given source ids (default: every repository and notes source); raises KeyError for an unknown id."""
    unknown = [i for i in ids or [] if i not in sources]
    if unknown:
        raise KeyError(unknown[0])
    chosen = [sources[i] for i in ids] if ids else [s for _, s in sorted(sources.items()) if s.kind in ("repo", "notes")]
    out = []
    for src in chosen:
        if src.kind not in ("repo", "notes"):
            out.append(FetchResult(src.id, "", "skipped", detail=f"a {src.kind} source has no repository"))
            if progress:
                progress(f"{src.id}: skipped ({out[-1].detail})")
            continue
        if progress:
            progress(f"{src.id}: fetching {len(src.pinned_shas())} pin(s) ...")
        out.append(fetch_source(cfg, src))
        if progress:
            progress(describe(out[-1]))
    return out


def describe(r: FetchResult) -> str:
    """One line for one source's outcome (a failure says why and how many pins are missing)."""
    if not r.ok:
        return (f"could not fetch {r.source}: {r.detail or r.action}"
                + (f" (missing {len(r.missing)} pin(s))" if r.missing else ""))
    return f"{r.source}: {r.action}" + (f" ({r.detail})" if r.detail else "")
