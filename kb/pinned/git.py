"""Read files of a git repository at a pinned commit, without a work tree.

One `git cat-file --batch` process serves every lookup in a repository, so
checking hundreds of anchors costs one process, not one per anchor.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


class GitError(RuntimeError):
    """A git repository could not be read as asked."""


class GitRepo:
    """A local clone or bare git directory, read by object name."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise GitError(f"no git directory at {self.path}")
        self._proc: subprocess.Popen[bytes] | None = None
        self._cache: dict[str, bytes | None] = {}

    def _batch(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                ["git", "-C", str(self.path), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._proc

    def read(self, rev: str, path: str) -> bytes | None:
        """Bytes of `path` at `rev`, or None when it does not exist there."""
        key = f"{rev}:{path}"
        if key in self._cache:
            return self._cache[key]
        proc = self._batch()
        assert proc.stdin and proc.stdout
        proc.stdin.write(key.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().decode().strip()
        if header.endswith("missing") or header.endswith("ambiguous") or not header:
            data = None
        else:
            parts = header.split()
            if len(parts) != 3:
                raise GitError(f"unexpected reply from git cat-file: {header!r}")
            size = int(parts[2])
            data = proc.stdout.read(size)
            proc.stdout.read(1)  # the newline after each object
            if parts[1] != "blob":
                data = None
        self._cache[key] = data
        return data

    def has_commit(self, sha: str) -> bool:
        """Whether the commit object exists in this repository."""
        res = subprocess.run(
            ["git", "-C", str(self.path), "cat-file", "-e", f"{sha}^{{commit}}"],
            capture_output=True,
        )
        return res.returncode == 0

    def git(self, *args: str) -> str:
        """Run a git command in this repository and return its stdout."""
        res = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True
        )
        if res.returncode != 0:
            raise GitError(f"git {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout

    def close(self) -> None:
        """Stop the batch process."""
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait(timeout=5)
            self._proc = None

    def __enter__(self) -> GitRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
