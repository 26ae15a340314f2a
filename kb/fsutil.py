"""Writing files so that a reader sees the old content or the new, never a mix.

Every file kb publishes (STATUS.md, the site, PROV, graphs, evidence) is
written to a temporary file in the same folder, flushed to disk and renamed
over the target: a kill or a full disk leaves the old file in place. A folder
output (the site) is built in a sibling temporary folder and swapped in with
one atomic exchange (Linux `renameat2(RENAME_EXCHANGE)`; two renames where the
system has no exchange). Temporary names carry the writer's pid, so what a
killed writer left behind is removed by the next write to the same place.
Failures of the file system become `OutputError`, which names the path; the
CLI turns it into exit 3 (the environment), not exit 4 (a bug).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# errno values that describe the machine (disk, permissions, read-only mounts), not a defect of kb.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS, errno.EDQUOT, errno.EIO, errno.ENOENT,
                       errno.ENOTDIR, errno.EISDIR}


class OutputError(OSError):
    """A file kb writes could not be written; the message names the path and the cause."""

    exit_code = 3

    def __init__(self, path: Path | str, cause: OSError) -> None:
        self.path = str(path)
        self.cause = cause
        why = os.strerror(cause.errno) if cause.errno else str(cause)
        super().__init__(cause.errno, f"cannot write {self.path}: {why}")

    def __str__(self) -> str:
        return self.args[1]


def is_environment_error(exc: BaseException) -> bool:
    """Whether an OSError is about the machine (disk full, permissions) rather than kb's logic."""
    return isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def _remove_leftovers(folder: Path, name: str, suffix: str) -> None:
    """Temporaries `.<name>.<pid>.*<suffix>` of writers that were killed (their pid is gone)."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\..*{re.escape(suffix)}\Z")
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            m = pattern.match(entry.name)
            if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        import ctypes

        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, ImportError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False  # the kernel or the file system has no exchange: two renames instead
    raise OSError(err, os.strerror(err), str(b))


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` in one rename; on any failure the old file stays as it was."""
    target = Path(path)
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(target.parent, target.name, ".tmp")
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
        _fsync_dir(target.parent)
    except OSError as exc:
        if isinstance(exc, OutputError):
            raise
        raise OutputError(target, exc) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def atomic_write_text(path: Path | str, text: str, mode: int = 0o644) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


@contextlib.contextmanager
def replaced_dir(dest: Path | str) -> Iterator[Path]:
    """Yield an empty sibling folder to build into; on success it replaces `dest` whole.

    The swap is one atomic exchange of the two folders, after which the old
    tree is removed. Where the system cannot exchange, it is two renames (old
    -> backup, new -> dest); a kill between them leaves the backup, which the
    next call restores before building. A failure while building leaves
    `dest` untouched.
    """
    dest = Path(os.path.abspath(dest))  # `-o .` has a name to put siblings beside
    backup = dest.with_name(f".{dest.name}.old")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        # A previous swap killed between its two renames: the old tree is in the backup.
        if backup.exists() and not dest.exists():
            os.replace(backup, dest)
        _remove_leftovers(dest.parent, dest.name, ".new")
        building = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=".new", dir=dest.parent))
    except OSError as exc:
        raise OutputError(dest, exc) from exc
    try:
        yield building
        os.chmod(building, 0o755)
        if dest.is_dir() and not dest.is_symlink() and _exchange(building, dest):
            _fsync_dir(dest.parent)
            shutil.rmtree(building, ignore_errors=True)  # `building` now holds the old tree
            return
        if backup.exists():
            shutil.rmtree(backup)
        if dest.exists():
            os.replace(dest, backup)
        os.replace(building, dest)
        _fsync_dir(dest.parent)
    except OSError as exc:
        shutil.rmtree(building, ignore_errors=True)
        if backup.exists() and not dest.exists():
            os.replace(backup, dest)
        if isinstance(exc, OutputError):
            raise
        raise OutputError(dest, exc) from exc
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    shutil.rmtree(backup, ignore_errors=True)
