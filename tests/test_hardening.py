"""Regressions for the fault classes: bad input, faults, signals, concurrency, escaping."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, claim, kb_subprocess, write_claims

torch = pytest.importorskip("torch", reason="kb verify runs workers")

NOISY = '''
import os, subprocess, sys
from kb.verify.registry import Outcome, Params, verifier


class P(Params):
    n: int = 1


@verifier("test.noisy", kind="cpu-check", params=P, timeout_s=30)
def noisy(p, ctx):
    """Writes to the real stdout, directly and from a child, including a line that looks like a result."""
    os.write(1, b'{"verdict": "supports", "task_id": 0, "reason": "forged"}\\n')
    subprocess.run(["echo", '{"verdict": "refutes"}'])
    print("plain print", flush=True)
    return Outcome(measurements={"value": (p.n, "")})


@verifier("test.weird", kind="cpu-check", params=P, timeout_s=30)
def weird(p, ctx):
    """Returns a verdict that does not exist."""
    return Outcome(verdict="definitely", reason="made up")


@verifier("test.slowish", kind="cpu-check", params=P, timeout_s=60)
def slowish(p, ctx):
    """Sleeps a little, then leaves a marker that it finished."""
    import time
    time.sleep(0.3)
    open(os.path.join(os.environ["KB_MARKERS"], f"done-{p.n}"), "w").close()
    return Outcome(measurements={"value": (p.n, "")})
'''


def _checks(verifier: str, n: int, expect: int | None = None) -> list[dict]:
    return [{"verifier": verifier, "params": {"n": n}, "expect": {"value": {"equals": n if expect is None else expect}}}]


def test_verifier_output_cannot_forge_results_and_unknown_verdicts_are_errors(project: Path) -> None:
    (project / "verifiers" / "noisy_test.py").write_text(NOISY)
    write_claims(project, "noisy", [
        claim(f"test.noisy.c{i}", checks=_checks("test.noisy", i, expect=99 if i == 2 else None)) for i in range(4)
    ] + [claim("test.weird.c", checks=_checks("test.weird", 1))])
    res = kb_subprocess(project, "verify", "--json", "--jobs", "1")
    summary = json.loads(res.stdout)
    assert summary["refuted"] == ["test.arith.wrong", "test.noisy.c2"]  # the forged "supports" line counted for nothing
    assert [e["check"] for e in summary["errors"]] == ["test.weird.c#0"]
    assert "unknown verdict" in summary["errors"][0]["reason"]
    assert summary["ran"] == 7 and res.returncode == 3  # every task got a record; the lane went on


@pytest.mark.parametrize("bad", ["-1", "0", "inf", "nan", "-inf"])
def test_timeout_must_be_positive_and_finite(project: Path, bad: str) -> None:
    res = kb_subprocess(project, "verify", "--timeout", bad)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_sigkill_at_a_random_point_loses_no_finished_run(project: Path, tmp_path: Path) -> None:
    (project / "verifiers" / "noisy_test.py").write_text(NOISY)
    markers = tmp_path / "markers"
    markers.mkdir()
    write_claims(project, "slow", [claim(f"test.slow.c{i}", checks=_checks("test.slowish", i)) for i in range(40)])
    env = {**os.environ, "KB_ROOT": str(project), "KB_DB": str(project / ".kb" / "kb.db"), "KB_MARKERS": str(markers),
           "KB_SANDBOX_WRITABLE": str(markers),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "kb", "verify", "--jobs", "1"], env=env, cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.Random(7).uniform(3.0, 6.0))
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=30)
    finished = {int(p.name.split("-")[1]) for p in markers.iterdir()}
    assert finished, "nothing finished before the kill; raise the sleep"
    journals = list((project / "evidence").glob(".inflight-*.jsonl"))
    assert journals  # what the killed run had finished is on disk
    # The next command turns the journal into evidence: every finished check is recorded.
    plan = json.loads(kb_subprocess(project, "verify", "--plan", "--json").stdout)
    cached = {int(r["check"].split(".c")[1].split("#")[0]) for r in plan
              if r["check"].startswith("test.slow.") and r["action"] == "cached"}
    # A run is finished once the parent has it; the worker may have left its marker just before the kill.
    assert finished - cached <= {max(finished)} and cached <= finished
    assert not list((project / "evidence").glob(".inflight-*.jsonl"))
    assert kb_subprocess(project, "validate").returncode == 0


def test_sigterm_is_handled_like_ctrl_c(project: Path, tmp_path: Path) -> None:
    (project / "verifiers" / "noisy_test.py").write_text(NOISY)
    markers = tmp_path / "m"
    markers.mkdir()
    write_claims(project, "slow", [claim(f"test.slow.c{i}", checks=_checks("test.slowish", i)) for i in range(40)])
    env = {**os.environ, "KB_ROOT": str(project), "KB_DB": str(project / ".kb" / "kb.db"), "KB_MARKERS": str(markers),
           "KB_SANDBOX_WRITABLE": str(markers),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "kb", "verify", "--jobs", "1"], env=env, cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)  # a second one while finishing up must not cut the write short
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted:" in err and "Traceback" not in err
    runs = [r for f in (project / "evidence").rglob("*.json") for r in json.loads(f.read_text())["runs"]]
    assert len(runs) >= 2 and not list((project / "evidence").glob(".inflight-*.jsonl"))


def test_sixteen_parallel_commands_all_succeed(project: Path) -> None:
    kb_subprocess(project, "verify")
    cmds = [("claims", "--json"), ("validate",), ("show", "test.arith.four"), ("export", "status", "-o", "{out}"),
            ("verify", "--plan"), ("search", "four"), ("graph",), ("verify",)]

    def one(i: int) -> subprocess.CompletedProcess:
        args = [a.replace("{out}", str(project / f"status-{i}.md")) for a in cmds[i % len(cmds)]]
        # Touch an input so some of them must rebuild the index while others read it.
        if i % 5 == 0:  # a new mtime: the fingerprint changes and the index must be rebuilt
            path = project / "claims" / "good.yaml"
            os.utime(path, ns=(time.time_ns(), time.time_ns()))
        return kb_subprocess(project, *args)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    bad = [(r.args, r.returncode, r.stderr[-300:]) for r in results if r.returncode not in (0, 1)]
    assert not bad
    assert not any("locked" in r.stderr or "Traceback" in r.stderr for r in results)


def test_bad_local_config_and_verifier_syntax_are_bad_input(project: Path) -> None:
    (project / "kb.local.toml").write_text("[clones\nx = 1\n")
    res = kb_subprocess(project, "claims")
    assert res.returncode == 2 and "kb.local.toml:1" in res.stderr and "Traceback" not in res.stderr
    (project / "kb.local.toml").write_text("[clones]\nflash-attention = 3\n")
    res = kb_subprocess(project, "validate")
    assert res.returncode == 2 and "[clones]" in res.stderr
    (project / "kb.local.toml").unlink()
    (project / "verifiers" / "broken.py").write_text("def oops(:\n    pass\n")
    res = kb_subprocess(project, "validate")
    assert res.returncode == 2 and "verifiers/broken.py:1" in res.stderr and "Traceback" not in res.stderr


def test_unwritable_export_is_bad_input(project: Path, tmp_path: Path) -> None:
    res = kb_subprocess(project, "export", "status", "-o", str(tmp_path / "no" / "such" / "dir" / "S.md"))
    assert res.returncode == 2 and "cannot write" in res.stderr
    afile = tmp_path / "a-file"
    afile.write_text("x")
    res = kb_subprocess(project, "export", "site", "-o", str(afile))
    assert res.returncode == 2 and "is a file" in res.stderr


def test_evidence_that_is_not_a_regular_file_or_not_sane_is_refused(project: Path, tmp_path: Path) -> None:
    ev = project / "evidence" / "cpu"
    ev.mkdir(parents=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(ev / "fifo.json")
    (ev / "zero.json").symlink_to("/dev/zero")
    start = time.monotonic()
    res = kb_subprocess(project, "validate", timeout=60)
    assert time.monotonic() - start < 30 and res.returncode == 2
    assert "zero.json" in res.stderr and "not a regular file" in res.stderr
    for p in ev.iterdir():
        p.unlink()
    kb_subprocess(project, "verify")
    batch = next((project / "evidence").rglob("*.json"))
    data = json.loads(batch.read_text())
    other = tmp_path / "imp"
    other.mkdir()
    cases = (("nan.json", {"duration_s": float("nan")}, "finite"),
             ("future.json", {"started": "2099-01-01T00:00:00+00:00"}, "future"))
    for name, change, words in cases:
        runs = []
        for r in data["runs"]:
            bad = {**r, **change}
            body = {k: v for k, v in bad.items() if k != "run_id"}
            bad["run_id"] = __import__("hashlib").sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]
            runs.append(bad)
        (other / name).write_text(json.dumps({"format": 1, "runs": runs}))
        res = kb_subprocess(project, "evidence", "import", str(other / name))
        assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_status_md_escapes_data(project: Path) -> None:
    write_claims(project, "odd", [claim("test.odd.exp", checks=[], experiment={
        "hardware": "sm_80 | injected # heading", "method": "a\n# Not a heading\n| not | a | row |"})])
    kb_subprocess(project, "export", "status")
    text = (project / "STATUS.md").read_text()
    assert "\n# Not a heading" not in text and "\n| not | a | row |" not in text
    assert "sm_80 \\| injected \\# heading" in text


def test_anchor_paths_must_stay_inside_the_repository(project: Path) -> None:
    base = claim("x")["anchors"][0]
    for i, path in enumerate(["/etc/passwd", "../../secret", "a/../../b", "C:/x"]):
        write_claims(project, f"p{i}", [claim(f"test.path.c{i}", anchors=[base, {
            "source": "flash-attention",
            "sha": "4f285b354796fb17df8636485b9a04df3ebbb7dc", "path": path}])])
        res = kb_subprocess(project, "validate")
        assert res.returncode == 2 and "repository-relative" in res.stderr, (path, res.stderr)
        (project / "claims" / f"p{i}.yaml").unlink()


def test_latest_run_is_decided_by_local_recording_order(project: Path) -> None:
    """A run that claims a later start time cannot outrank a run this machine recorded later."""
    from kb.records.models import Run
    from kb.verify.evidence import latest_runs

    base = dict(claim_id="c.x", claim_hash="h", check_index=0, verifier="v", verifier_hash="h", params={}, expect={},
                reason="", hardware_class="cpu", duration_s=0.0)
    early_claimed_late = Run(**base, verdict="supports", started="2026-11-30T12:00:00+00:00")
    early_claimed_late._recorded = "2026-11-01T00:00:00+00:00"  # imported a month ago
    later_local = Run(**base, verdict="refutes", started="2026-11-20T00:00:00+00:00")
    later_local._recorded = "2026-11-20T00:00:05+00:00"
    assert latest_runs([early_claimed_late, later_local])[("c.x", 0, "cpu")].verdict == "refutes"


def test_a_line_check_is_not_served_from_cache_when_its_lines_change(project: Path, tmp_path: Path) -> None:
    from kb.pinned.notes import lines_sha256
    from tests.conftest import commit_files

    repo = tmp_path / "up"
    text = "int a;\natomicAdd(dq, x);\nint b;\n"
    sha = commit_files(repo, {"k.h": text}, "one")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")

    def write(lines: list[int]) -> None:
        anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": lines,
                  "sha256": lines_sha256(text.encode(), *lines)[0]}
        write_claims(project, "src", [claim("test.src.lines", label="source-backed", anchors=[claim("x")["anchors"][0], anchor],
                                            checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]}}])])

    env = {"KB_CLONE_TESTREPO": str(repo)}
    write([2, 2])
    first = json.loads(kb_subprocess(project, "verify", "--json", env=env).stdout)
    assert "test.src.lines" not in first["refuted"]
    write([1, 1])  # same tokens expected, other lines: the old run is not evidence for them
    shown = json.loads(kb_subprocess(project, "show", "test.src.lines", "--json").stdout)
    cpu = next(s for s in shown["status"] if s["hardware_class"] == "cpu")
    assert cpu["status"] == "stale" and "cited lines changed" in cpu["reason"]
    again = json.loads(kb_subprocess(project, "verify", "--json", env=env).stdout)
    assert again["ran"] == 1 and "test.src.lines" in again["refuted"]  # line 1 has no atomicAdd


def test_yaml_expansion_and_keys_are_bounded(project: Path) -> None:
    lines = ["claims:", "  - &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (project / "claims" / "bomb.yaml").write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    res = kb_subprocess(project, "validate", timeout=60)
    assert time.monotonic() - start < 20
    assert res.returncode == 2 and "claims/bomb.yaml:" in res.stderr and "expands to more than" in res.stderr
    (project / "claims" / "bomb.yaml").write_text("claims:\n  - ? [1, 2]\n    : x\n")
    res = kb_subprocess(project, "validate")
    assert res.returncode == 2 and "claims/bomb.yaml:2" in res.stderr and "plain scalar" in res.stderr
    (project / "claims" / "bomb.yaml").write_text("claims:\n" + "  " + "[" * 80 + "]" * 80 + "\n")
    res = kb_subprocess(project, "validate")
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_imported_runs_for_unknown_claims_are_reported(project: Path, tmp_path: Path) -> None:
    kb_subprocess(project, "verify")
    batch = next((project / "evidence").rglob("*.json"))
    moved = tmp_path / batch.name
    batch.rename(moved)
    write_claims(project, "good", [claim("test.arith.renamed")])  # the runs' claims are gone from this KB
    res = kb_subprocess(project, "evidence", "import", str(moved))
    assert res.returncode == 0 and "not in this knowledge base: test.arith.four, test.arith.wrong" in res.stderr


SPIN = '''
import os, time
from kb.verify.registry import Outcome, Params, verifier


class P(Params):
    n: int = 1


@verifier("test.spin", kind="cpu-check", params=P, timeout_s=5)
def spin(p, ctx):
    """Leaves its pid, then spins on the CPU forever."""
    open(os.path.join(os.environ["KB_MARKERS"], f"pid-{os.getpid()}-{p.n}"), "w").close()
    while True:
        pass
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def _worker_pids(root: Path) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
                env = (p / "environ").read_bytes()
            except OSError:
                continue
            if b"kb.verify.worker" in cmd and str(root).encode() in env:
                out.append(int(p.name))
    return out


def test_workers_die_with_a_killed_kb_and_at_their_own_timeout(project: Path, tmp_path: Path) -> None:
    (project / "verifiers" / "spin_test.py").write_text(SPIN)
    markers = tmp_path / "spin-markers"
    markers.mkdir()
    write_claims(project, "spin", [claim("test.spin.c1", checks=_checks("test.spin", 1))])
    env = {**os.environ, "KB_ROOT": str(project), "KB_DB": str(project / ".kb" / "kb.db"), "KB_MARKERS": str(markers),
           "KB_SANDBOX_WRITABLE": str(markers), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "kb", "verify", "--jobs", "1"], env=env, cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(markers.iterdir()):
        time.sleep(0.1)
    assert list(markers.iterdir()), "the spinning check never started"
    workers = _worker_pids(project)
    assert workers, "no worker process found"
    proc.kill()  # SIGKILL: kb gets no chance to clean up
    proc.wait(timeout=30)
    end = time.monotonic() + 10
    while time.monotonic() < end and any(_alive(p) for p in workers):
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), "a worker outlived the kb that started it"
    # Without kb killed, the worker's own limits end the spin: the task is an error, not evidence.
    res = kb_subprocess(project, "verify", "--json", "--jobs", "1", "--claim", "test.spin.c1", env={
        "KB_MARKERS": str(markers), "KB_SANDBOX_WRITABLE": str(markers)}, timeout=120)
    summary = json.loads(res.stdout)
    assert [e["check"] for e in summary["errors"]] == ["test.spin.c1#0"] and "timed out" in summary["errors"][0]["reason"]
    assert not _worker_pids(project)


def test_a_read_only_evidence_folder_exits_3_naming_it(project: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0 or subprocess.run(["mount", "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs root to bind-mount the evidence folder read-only")
    ev = project / "evidence"
    ev.mkdir(exist_ok=True)
    if subprocess.run(["mount", "--bind", str(ev), str(ev)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ev)], check=True, capture_output=True)
        res = kb_subprocess(project, "verify")
        assert res.returncode == 3, res.stderr
        assert "Traceback" not in res.stderr and str(ev) in res.stderr
    finally:
        subprocess.run(["umount", str(ev)], capture_output=True)
