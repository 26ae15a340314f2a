"""`kb verify --online`: cited files at their pinned SHA, fetched by kb's one HTTP client before the checks run.

A check that reads cited lines (`Requirements.online_fallback`) of a GitHub-hosted source with no
local clone reads the file from `<http cache>/raw/<owner>/<repo>/<sha>/<path>`. kb fills that cache
here, in the parent process, through `kb.http.HttpClient` (retries, rate limits, gzip and deflate
bodies), so the workers find the file on disk. Content at a full SHA never changes: a file already
in the cache is never asked for again. A file that cannot be stored (404, a fault) is left out, and
the check reports it when it runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kb.config import Config
from kb.fsutil import atomic_write_bytes
from kb.http import FetchError, HttpClient, NotFound, cache_dir
from kb.records.loader import Corpus
from kb.verify.plan import Task

_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass
class Prefetch:
    """What the prefetch did: files stored, already cached, and those it could not store (path -> why)."""

    stored: int = 0
    cached: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def raw_base() -> str:
    """GitHub's raw-file host ($KB_RAW_BASE in tests)."""
    import os

    return os.environ.get("KB_RAW_BASE", "https://raw.githubusercontent.com").rstrip("/")


def raw_path(root: Path, slug: str, sha: str, path: str) -> Path | None:
    """Where the file of `slug` at `sha` lives in the raw cache; None when the names would leave it."""
    base = (cache_dir(root) / "raw").resolve()
    target = (base / slug / sha / path).resolve()
    if not _SHA.fullmatch(sha) or not target.is_relative_to(base) or not slug or ".." in slug.split("/"):
        return None
    return target


def wanted_files(tasks: list[Task], corpus: Corpus, clones: dict[str, str]) -> set[tuple[str, str, str]]:
    """(owner/repo, sha, path) of every cited file the tasks will read online (no clone of the source here)."""
    out = set()
    for t in tasks:
        if not t.spec.requires.online_fallback:
            continue
        ix = t.claim.checks[t.index].params.get("anchor", 0)
        if not isinstance(ix, int) or not 0 <= ix < len(t.claim.anchors):
            continue
        a = t.claim.anchors[ix]
        src = corpus.sources.get(a.source)
        url = (src.url or src.repo or "") if src else ""
        if a.source in clones or not url.startswith("https://github.com/") or not a.sha or not a.path:
            continue
        out.add((url.removeprefix("https://github.com/").strip("/"), a.sha, a.path))
    return out


def prefetch(cfg: Config, tasks: list[Task], corpus: Corpus, clones: dict[str, str],
             client: HttpClient | None = None) -> Prefetch:
    """Store every cited file the online checks need in the raw cache; never raises for network faults."""
    result = Prefetch()
    files = sorted(wanted_files(tasks, corpus, clones))
    if not files:
        return result
    client = client or HttpClient(cache_dir(cfg.root))
    for slug, sha, path in files:
        target = raw_path(cfg.root, slug, sha, path)
        if target is None:
            result.failed[f"{slug}@{sha[:12]}:{path}"] = "would leave the cache folder"
            continue
        if target.exists():
            result.cached += 1
            continue
        try:
            resp = client.get(f"{raw_base()}/{slug}/{sha}/{path}", accept="*/*", keep=False)
        except NotFound:
            result.failed[f"{slug}@{sha[:12]}:{path}"] = "HTTP 404"
            continue
        except FetchError as exc:
            result.failed[f"{slug}@{sha[:12]}:{path}"] = str(exc)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, resp.body)
        result.stored += 1
    return result
