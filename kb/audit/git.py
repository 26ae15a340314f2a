"""The git backend: a local clone per source, one diff per pin, blobs through one cat-file process.

Per repository the audit spends one `git cat-file --batch` process (head and
pin resolution, every blob read), one `git diff --raw -M` per pin (git's rename
detection), at most one `git grep` for all symbols that need a search, and,
online, one `git fetch` (or `git clone --bare` the first time). Online fetches
land in kb's own repositories: the clone cache (.kb/clones/), or, for a clone the
user named in kb.local.toml, .kb/audit-git/<id>.git borrowing that clone's objects;
the user's clone is never written.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kb.audit.classify import Change, PinDiff, symbol_line, symbol_parts
from kb.audit.model import RepoSide, Unchecked
from kb.config import Config
from kb.pinned.git import GitError, GitRepo
from kb.records.models import Source

# Every git process the audit starts, for the benchmark and the report.
SPAWNED = {"count": 0}

_UNREADABLE = re.compile(r"unable to read ([0-9a-f]{40})")
UPSTREAM_HEAD = "refs/kb/upstream-head"
UPSTREAM_REF = "refs/kb/upstream-ref"


def _git(path: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
    SPAWNED["count"] += 1
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    cmd = ["git", "-C", str(path), *args]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        # Reported like any other git failure (the caller turns it into "unchecked").
        return subprocess.CompletedProcess(cmd, 124, b"", f"git {args[0]} timed out after {timeout:g} s".encode())


class _BatchRepo(GitRepo):
    """GitRepo whose one batch process also resolves revisions (no rev-parse per pin)."""

    def _batch(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            SPAWNED["count"] += 1
        return super()._batch()

    def resolve(self, rev: str) -> str | None:
        """The commit SHA `rev` names, or None."""
        proc = self._batch()
        assert proc.stdin and proc.stdout
        proc.stdin.write(f"{rev}^{{commit}}\n".encode())
        proc.stdin.flush()
        parts = proc.stdout.readline().decode().split()
        if len(parts) != 3:
            return None
        proc.stdout.read(int(parts[2]) + 1)
        return parts[0] if parts[1] == "commit" else None


def clone_dir(cfg: Config, source_id: str) -> Path:
    """Where a source's clone lives: the configured path, else the clone cache."""
    if source_id in cfg.clones:
        return Path(cfg.clones[source_id]).expanduser()
    return (cfg.clone_cache or cfg.root / ".kb" / "clones") / f"{source_id}.git"


def fetch_dir(cfg: Config, source_id: str) -> Path:
    """kb's own repository that online audits fetch into when the source's clone is the user's (kb.local.toml).

    A bare repository under .kb/audit-git/ that borrows the user's objects (`objects/info/alternates`),
    so only what upstream has beyond that clone is downloaded, and the user's clone is only read: no ref,
    object or config of it is ever written.
    """
    return cfg.root / ".kb" / "audit-git" / f"{source_id}.git"


def _objects_dir(clone: Path) -> Path | None:
    """The object folder of a clone (bare or not, worktrees included), or None when it is not a git repository."""
    res = _git(clone, "rev-parse", "--path-format=absolute", "--git-common-dir", timeout=60)
    if res.returncode != 0:
        return None
    return Path(res.stdout.decode().strip()) / "objects"


def _overlay(cfg: Config, source_id: str, clone: Path) -> Path:
    """kb's fetch repository over the user's clone (created on first use); raises Unchecked when it cannot be."""
    path = fetch_dir(cfg, source_id)
    objects = _objects_dir(clone)
    if objects is None or not objects.is_dir():
        raise Unchecked(f"{clone} (kb.local.toml [clones] {source_id}) is not a git repository")
    if not (path / "HEAD").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        res = _git(path.parent, "init", "--bare", "--quiet", str(path), timeout=60)
        if res.returncode != 0:
            raise Unchecked(f"git init {path} failed: {res.stderr.decode(errors='replace').strip()[-300:]}")
    # Rewritten every time: the user may have moved the clone named in kb.local.toml.
    alternates = path / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects}\n")
    return path


def _timeout() -> float:
    return float(os.environ.get("KB_GIT_TIMEOUT", "600"))


class GitSource(RepoSide):
    """One source's clone: fetched when online, compared pin by pin against one head."""

    def __init__(self, source: Source, cfg: Config, *, offline: bool, ref: str | None) -> None:
        super().__init__(source, offline=offline, ref=ref)
        self.url = source.url or source.repo or ""
        self.cfg = cfg
        self.path = clone_dir(cfg, source.id)
        # The user's own clone (kb.local.toml / KB_CLONE_*) is read, never fetched into.
        self.users = source.id in cfg.clones
        self._repo: _BatchRepo | None = None
        self._missing: set[str] = set()

    # -- setup -----------------------------------------------------------
    def open(self) -> None:
        """Find (or, online, create and fetch) the clone and resolve the head; raises Unchecked."""
        fetched = False
        if self.users and not self.path.exists():
            # Never created for the user: the path they named is theirs.
            raise Unchecked(f"the clone named for {self.source.id} (kb.local.toml or KB_CLONE_*) does not exist: "
                            f"{self.path}", offline=self.offline)
        if not self.path.exists():
            if self.offline:
                raise Unchecked(f"no local clone at {self.path} (offline; set [clones] {self.source.id} in kb.local.toml)",
                                offline=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            res = _git(self.path.parent, "clone", "--bare", "--quiet", self.url, str(self.path), timeout=_timeout())
            if res.returncode != 0:
                raise Unchecked(f"git clone {self.url} failed: {res.stderr.decode(errors='replace').strip()[-300:]}")
        user_clone = self.path if self.users else None
        if self.users and self.path.exists():
            overlay = fetch_dir(self.cfg, self.source.id)
            if not self.offline:
                self.path = _overlay(self.cfg, self.source.id, self.path)
            elif not self.ref and _has_ref(overlay, UPSTREAM_HEAD):
                # Offline: the head the last online audit fetched (into kb's repository) is the best known.
                self.path = _overlay(self.cfg, self.source.id, self.path)
        if not self.offline:
            fetched = self._fetch()
        self._repo = _BatchRepo(self.path)
        if self.ref:
            names = [UPSTREAM_REF] if fetched else [self.ref]
        else:
            names = [UPSTREAM_HEAD] if fetched else [UPSTREAM_HEAD, "refs/remotes/origin/HEAD", "HEAD"]
        for name in names:
            sha = self._repo.resolve(name)
            if sha is None and user_clone is not None and user_clone != self.path and name != UPSTREAM_HEAD:
                # kb's repository has no branches of its own: the user's clone's, read only (its objects are shared).
                sha = _rev(user_clone, name)
            if sha:
                self.head, self.head_ref = sha, name
                break
        else:
            raise Unchecked(f"cannot resolve {' / '.join(names)} in {self.path}")
        if self.head_ref == UPSTREAM_REF:
            self.head_ref = f"{self.ref} (fetched)"

    def _fetch(self) -> bool:
        target = UPSTREAM_REF if self.ref else UPSTREAM_HEAD
        spec = f"+{self.ref or 'HEAD'}:{target}"
        res = _git(self.path, "fetch", "--quiet", "--no-tags", self.url, spec, timeout=_timeout())
        if res.returncode != 0:
            self.stale_head = f"git fetch {self.url} failed: {res.stderr.decode(errors='replace').strip()[-300:]}"
            return False
        return True

    @property
    def repo(self) -> _BatchRepo:
        """The open batch reader."""
        assert self._repo is not None, "open() first"
        return self._repo

    # -- per pin ----------------------------------------------------------
    def diff(self, pin: str) -> PinDiff:
        """What changed from pin to head: one `git diff --raw -M` (more only if the clone lacks blobs)."""
        if self.repo.resolve(pin) is None:
            raise Unchecked(f"pin {pin} is not in the clone at {self.path} (fetch it)")
        out = PinDiff(pin=pin, head=self.head, missing=set(self._missing))
        if pin == self.head:
            return out
        by_oid: dict[str, str] | None = None
        for _ in range(8):
            res = self._raw_diff(pin, renames=True)
            err = res.stderr.decode(errors="replace")
            if res.returncode == 0:
                if "rename detection was skipped" in err:
                    out.notes.append("git skipped inexact rename detection (too many files); renames may show as deletions")
                out.changes = _parse_raw(res.stdout)
                out.missing = set(self._missing)
                if self._missing:
                    out.notes.append("left out of the diff (blobs missing from the clone): " + ", ".join(sorted(self._missing)))
                return out
            m = _UNREADABLE.search(err)
            if not m:
                raise Unchecked(f"git diff {pin[:12]} {self.head[:12]} failed: {err.strip()[-300:]}")
            # The clone lacks a blob (a stripped or partial mirror). Rename detection
            # must read blobs, so leave that path out and try again.
            if by_oid is None:
                plain = self._raw_diff(pin, renames=False)
                by_oid = _paths_by_oid(plain.stdout) if plain.returncode == 0 else {}
            path = by_oid.get(m.group(1))
            if path is None or path in self._missing:
                break
            self._missing.add(path)
        plain = self._raw_diff(pin, renames=False)
        if plain.returncode != 0:
            raise Unchecked(f"git diff {pin[:12]} {self.head[:12]} failed: {plain.stderr.decode(errors='replace').strip()[-300:]}")
        out.changes = _parse_raw(plain.stdout)
        out.notes.append("git rename detection unavailable (unreadable blobs); renames show as deletions")
        return out

    def _raw_diff(self, pin: str, renames: bool) -> subprocess.CompletedProcess[bytes]:
        args = ["diff", "--raw", "-z", "--no-abbrev", "-M" if renames else "--no-renames", pin, self.head, "--", "."]
        args += [f":(exclude,literal){p}" for p in sorted(self._missing)]
        return _git(self.path, *args, timeout=_timeout())

    # -- Reader -------------------------------------------------------------
    def read(self, rev: str, path: str) -> bytes | None:
        """Bytes of path at rev through the batch process."""
        try:
            return self.repo.read(rev, path)
        except GitError:
            return None

    def find_symbols(self, rev: str, symbols: set[str]) -> dict[str, list[tuple[str, int]]] | None:
        """symbol -> [(path, line)] at rev, from one `git grep -l` and blob reads.

        Only the first part of a qualified symbol (`Class` of `Class::method`)
        is grepped, for files only (`-l`, fast even for common words); each
        candidate file is then read once and checked for every part.
        """
        if not symbols:
            return {}
        keys = sorted({parts[0] for s in symbols if (parts := symbol_parts(s))})
        args = ["grep", "-l", "-w", "-I", "-F", "--null"]
        for k in keys:
            args += ["-e", k]
        args += [rev, "--", "."] + [f":(exclude,literal){p}" for p in sorted(self._missing)]
        res = _git(self.path, *args, timeout=_timeout())
        if res.returncode not in (0, 1):
            self.notes.append(f"git grep failed: {res.stderr.decode(errors='replace').strip()[-200:]}")
            return None
        if b"unable to read" in res.stderr:
            self.notes.append("git grep could not read some blobs missing from the clone")
        prefix = f"{rev}:"
        hits: dict[str, list[tuple[str, int]]] = {s: [] for s in symbols}
        for name in res.stdout.decode("utf-8", "surrogateescape").split("\0"):
            path = name.strip("\n").removeprefix(prefix)
            blob = self.read(rev, path) if path else None
            if blob is None:
                continue
            for s in symbols:
                line = symbol_line(blob, s)
                if line is not None:
                    hits[s].append((path, line))
        return hits

    def close(self) -> None:
        """Stop the batch process."""
        if self._repo is not None:
            self._repo.close()


def _rev(gitdir: Path, name: str) -> str | None:
    res = _git(gitdir, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", timeout=60)
    return res.stdout.decode().strip() or None if res.returncode == 0 else None


def _has_ref(gitdir: Path, ref: str) -> bool:
    return (gitdir / "HEAD").exists() and _git(gitdir, "rev-parse", "--verify", "--quiet", ref, timeout=60).returncode == 0


def _parse_raw(out: bytes) -> dict[str, Change]:
    """`git diff --raw -z` output -> {path at pin: Change}. Added files are not keyed (no anchor can cite them)."""
    toks = out.decode("utf-8", "surrogateescape").split("\0")
    changes: dict[str, Change] = {}
    i = 0
    while i < len(toks) and toks[i].startswith(":"):
        status = toks[i].split()[-1]
        letter = status[0]
        if letter in "RC":
            old, new = toks[i + 1], toks[i + 2]
            if letter == "R":
                changes[old] = Change("R", new)
            i += 3
            continue
        if letter != "A":
            changes[toks[i + 1]] = Change(letter)
        i += 2
    return changes


def _paths_by_oid(out: bytes) -> dict[str, str]:
    toks = out.decode("utf-8", "surrogateescape").split("\0")
    by: dict[str, str] = {}
    for i in range(0, len(toks) - 1, 2):
        meta = toks[i].split()
        if len(meta) >= 4:
            by[meta[2]] = toks[i + 1]
            by[meta[3]] = toks[i + 1]
    return by
