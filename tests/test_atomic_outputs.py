"""Outputs are whole or untouched: kills, a full disk and a read-only folder never leave a mix (kb.fsutil).

Also: control characters in record text never reach the terminal raw.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO, claim, kb_subprocess, write_claims

# Run in the child before kb: every write-mode open under $KB_SLOW_UNDER writes in four pieces, 10 ms apart (a
# slow disk), and the first such open creates $KB_SLOW_MARK, so the test can kill while the output is written.
SLOW_WRITES = """
import builtins, io, os, time
_open, _under, _mark = io.open, os.environ["KB_SLOW_UNDER"], os.environ["KB_SLOW_MARK"]

class _Slow:
    def __init__(self, f):
        self._f = f
    def write(self, data):
        step, n = max(1, len(data) // 4), 0
        for i in range(0, len(data), step):
            n += self._f.write(data[i:i + step])
            self._f.flush()
            time.sleep(0.01)
        return n
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def _slow_open(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    path = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else os.path.abspath(file)
    if any(c in mode for c in "wax+") and path.startswith(_under):
        if not os.path.exists(_mark):
            _open(_mark, "w").close()
        return _Slow(f)
    return f

io.open = builtins.open = _slow_open
from kb.cli import main
main()
"""

KILLS = 15  # kill points per command


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (dotfiles too) and the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _grow_corpus(project: Path) -> None:
    """A new claim and a changed statement: the next export differs from the last in many files."""
    write_claims(project, "more", [
        claim("test.arith.extra", statement="Three plus one equals four, stated for a test.",
              checks=[{"verifier": "arith.eval", "params": {"expr": "3 + 1"}, "expect": {"value": {"equals": 4}}}]),
        claim("test.review.more", checks=[], review="Rationale only; stated for a test.")])


def _slow_kb(project: Path, out: Path, mark: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "KB_ROOT": str(project), "KB_DB": str(project / ".kb" / "kb.db"), "PYTHONPATH": str(REPO),
           "KB_SLOW_UNDER": str(out), "KB_SLOW_MARK": str(mark)}
    return subprocess.Popen([sys.executable, "-c", SLOW_WRITES, *args], env=env, cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(mark: Path, proc: subprocess.Popen) -> float:
    while not mark.exists() and proc.poll() is None:
        time.sleep(0.002)
    assert mark.exists(), f"kb wrote nothing under the output folder: {proc.communicate()[1][-2000:]}"
    return time.monotonic()


def _kill_while_writing(project: Path, out: Path, args: tuple[str, ...], reset, state, seed: int) -> Counter:
    """Export once to learn the new output and how long writing takes; then reset to the old output and kill
    at KILLS random points from the start of writing to the end of the process. Returns the outcomes."""
    old = state()
    mark = out.parent / "mark"
    proc = _slow_kb(project, out, mark, *args)
    started = _wait_for(mark, proc)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    span = time.monotonic() - started
    new = state()
    assert new != old
    rng, seen = random.Random(seed), Counter()
    for _ in range(KILLS):
        reset()
        mark.unlink()
        proc = _slow_kb(project, out, mark, *args)
        _wait_for(mark, proc)
        time.sleep(rng.uniform(0, span * 1.1))
        proc.kill()  # SIGKILL: no handler, no cleanup
        proc.communicate(timeout=60)
        now = state()
        assert now in (old, new), "a kill left an output that is neither the old one nor the new one"
        seen["old" if now == old else "new"] += 1
    assert seen["old"], f"no kill landed while the output was being written ({seen}); the test proved nothing"
    # The next export removes what the killed ones left beside the output, and completes.
    reset()
    res = kb_subprocess(project, *args)
    assert res.returncode == 0, res.stderr
    assert state() == new
    return seen


def test_kill_during_export_status_leaves_the_old_or_the_new_file(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "STATUS.md"
    assert kb_subprocess(project, "export", "status", "-o", str(target)).returncode == 0
    old = target.read_bytes()
    _grow_corpus(project)
    _kill_while_writing(project, out, ("export", "status", "-o", str(target)),
                        reset=lambda: target.write_bytes(old), state=target.read_bytes, seed=6)
    assert [p.name for p in out.iterdir()] == ["STATUS.md"]  # no temporary file left behind


def test_kill_during_export_site_leaves_the_old_or_the_new_site(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    site = out / "site"
    assert kb_subprocess(project, "export", "site", "-o", str(site)).returncode == 0
    (site / "CNAME").write_text("kb.example.org\n")  # a file of the publisher's: every export keeps it
    saved = tmp_path / "old-site"
    shutil.copytree(site, saved, symlinks=True)
    _grow_corpus(project)

    def reset() -> None:
        shutil.rmtree(site)
        shutil.copytree(saved, site, symlinks=True)

    _kill_while_writing(project, out, ("export", "site", "-o", str(site)), reset=reset,
                        state=lambda: _tree(site), seed=7)
    assert (site / "CNAME").read_text() == "kb.example.org\n" and (site / "claims" / "test.arith.extra.html").is_file()
    assert [p.name for p in out.iterdir()] == ["site"]  # no half-built or old folder left behind


@contextlib.contextmanager
def _mounted(*setup: list[str]):
    """Run mount commands (root only), unmount on the way out; skip where this machine cannot mount."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a file system")
    target = setup[0][-1]
    try:
        for cmd in setup:
            subprocess.run(cmd, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here: {getattr(exc, 'stderr', b'') or exc}")
    try:
        yield
    finally:
        subprocess.run(["umount", target], check=False, capture_output=True)


def _fill(folder: Path) -> None:
    """Take every free byte of the file system holding `folder`."""
    with open(folder / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)


def test_full_disk_keeps_the_old_outputs_and_exits_3(project: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    with _mounted(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)]):
        status, site = disk / "STATUS.md", disk / "site"
        assert kb_subprocess(project, "export", "status", "-o", str(status)).returncode == 0
        assert kb_subprocess(project, "export", "site", "-o", str(site)).returncode == 0
        old_status, old_site = status.read_bytes(), _tree(site)
        write_claims(project, "more", [claim(f"test.arith.more-{i}") for i in range(40)])  # more to write than fits
        _fill(disk)
        res = kb_subprocess(project, "export", "status", "-o", str(status))
        assert res.returncode == 3, res.stderr
        assert res.stderr.strip().splitlines() == [f"kb: cannot write {status}: No space left on device"]
        assert status.read_bytes() == old_status
        res = kb_subprocess(project, "export", "site", "-o", str(site))
        assert res.returncode == 3, res.stderr
        assert f"kb: cannot write {site}: No space left on device" in res.stderr and "Traceback" not in res.stderr
        assert _tree(site) == old_site
        assert sorted(p.name for p in disk.iterdir()) == ["STATUS.md", "filler", "site"]  # no temporaries left


@pytest.fixture()
def read_only(tmp_path: Path):
    """A folder the test process cannot write into: a read-only bind mount as root, mode 0555 otherwise."""
    folder = tmp_path / "ro"
    folder.mkdir()

    def lock() -> contextlib.AbstractContextManager:
        if os.geteuid() != 0:
            folder.chmod(0o555)
            return contextlib.nullcontext()
        return _mounted(["mount", "--bind", str(folder), str(folder)],
                        ["mount", "-o", "remount,bind,ro", str(folder)])

    yield folder, lock
    folder.chmod(0o755)


def test_read_only_output_folder_exits_3_naming_the_path(project: Path, read_only) -> None:
    folder, lock = read_only
    status, site = folder / "STATUS.md", folder / "site"
    assert kb_subprocess(project, "export", "status", "-o", str(status)).returncode == 0
    assert kb_subprocess(project, "export", "site", "-o", str(site)).returncode == 0
    old_status, old_site = status.read_bytes(), _tree(site)
    _grow_corpus(project)
    with lock():
        for args, path in ((("export", "status", "-o", str(status)), status), (("export", "site", "-o", str(site)), site)):
            res = kb_subprocess(project, *args)
            assert res.returncode == 3, res.stderr
            line, = res.stderr.strip().splitlines()
            assert line.startswith(f"kb: cannot write {path}: ") and line.endswith(
                ("Read-only file system", "Permission denied")), line
        assert status.read_bytes() == old_status and _tree(site) == old_site


OSC = "\x1b]0;owned\x07"  # sets the terminal's title; a CSI sequence follows
EVIL = f"Four is {OSC}two plus two\x1b[2J, stated\x9b for a test."
SHOWN = "Four is \\x1b]0;owned\\x07two plus two\\x1b[2J, stated\\x9b for a test."


def test_control_characters_in_records_are_shown_escaped(project: Path, run_kb) -> None:
    write_claims(project, "evil", [claim("test.evil.osc", statement=EVIL, checks=[],
                                         review=f"Says nothing{OSC} checkable.")])
    for args in (("show", "test.evil.osc"), ("claims",), ("search", "owned"), ("claims", "--tsv")):
        res = run_kb(*args)
        assert res.exit_code == 0, res.output
        assert SHOWN in res.stdout, (args, res.stdout)
        assert not any(c in res.stdout for c in "\x1b\x07\x9b"), args
    assert "review-only: Says nothing\\x1b]0;owned\\x07 checkable." in run_kb("show", "test.evil.osc").stdout
    # JSON stays valid JSON and keeps the statement exactly (json.dumps escapes control characters).
    for args in (("show", "test.evil.osc", "--json"), ("claims", "--json")):
        text = run_kb(*args).stdout
        assert "\x1b" not in text
        data = json.loads(text)
        assert (data if isinstance(data, dict) else next(c for c in data if c["id"] == "test.evil.osc"))[
            "statement"] == EVIL
