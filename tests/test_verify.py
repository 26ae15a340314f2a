"""Verification: negative controls for every CPU verifier kind, harness faults, cache, evidence."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kb.pinned.notes import lines_sha256
from tests.conftest import claim, commit_files, kb_subprocess, write_claims

torch = pytest.importorskip("torch", reason="CPU checks need torch (pip install torch==2.13.0)")


def _verify(root: Path, *args: str) -> tuple[int, dict]:
    res = kb_subprocess(root, "verify", "--json", *args)
    assert res.stdout, res.stderr
    return res.returncode, json.loads(res.stdout)


def _math(cid: str, verifier: str, params: dict, expect: dict) -> dict:
    return claim(cid, checks=[{"verifier": verifier, "params": params, "expect": expect}])


def test_cpu_kinds_support_true_and_refute_false(project: Path) -> None:
    """Every CPU verifier: a true expectation supports, a false one refutes."""
    tight = {"max_abs_err": {"at_most": 1e-9}}
    impossible = {"max_abs_err": {"at_least": 1.0}}
    pairs = [
        ("math.online-softmax", {"n": 128, "block": 32, "masked_rows": 2}, tight, impossible),
        ("math.deferred-normalization", {"n": 128, "block": 32}, tight, impossible),
        ("math.logsumexp", {"n": 128, "block": 16}, tight, impossible),
        ("math.backward-identities", {"n": 48, "d": 16, "causal": True}, tight, impossible),
        ("math.tiled-forward", {"style": "fa1", "causal": True, "block_q": 16, "block_k": 32, "n": 100}, tight, impossible),
        ("math.tiled-forward", {"style": "fa2", "causal": False, "block_q": 32, "block_k": 16, "n": 100}, tight, impossible),
        ("math.tiled-backward", {"style": "fa2", "causal": True, "block_q": 16, "block_k": 16, "n": 64}, tight, impossible),
        ("math.softmax-shift", {"n": 64}, tight, impossible),
        ("math.exp2-rewrite", {"n": 64}, {"max_abs_err": {"at_most": 1e-12}}, impossible),
        ("math.fp-sum-order", {"partials": 3}, {"order_dependent": {"is": True}}, {"order_dependent": {"is": False}}),
        ("math.fp-sum-order", {"partials": 2}, {"order_dependent": {"is": False}}, {"order_dependent": {"is": True}}),
        ("math.causal-tiles", {"n": 512, "block_q": 128, "block_k": 128}, {"tiles_visited": {"equals": 10}},
         {"tiles_visited": {"equals": 16}}),
        ("heuristic.num-splits", {"rule": "deterministic-current", "batch": 1, "heads": 32, "sm_count": 108},
         {"num_splits": {"equals": 4}}, {"num_splits": {"equals": 3}}),
        ("heuristic.num-splits", {"rule": "fwd-v1.0.9", "batch": 1, "heads": 48, "sm_count": 108, "max_splits": 3},
         {"num_splits": {"equals": 2}}, {"num_splits": {"equals": 3}}),
        ("arith.eval", {"expr": "H100.sm_count * 2"}, {"value": {"equals": 264}}, {"value": {"equals": 263}}),
    ]
    claims = []
    for i, (ver, params, good, bad) in enumerate(pairs):
        claims.append(_math(f"test.pos.c{i}", ver, params, good))
        claims.append(_math(f"test.neg.c{i}", ver, params, bad))
    write_claims(project, "kinds", claims)
    code, summary = _verify(project)
    assert summary["errors"] == []
    refuted = set(summary["refuted"])
    for i, (ver, *_rest) in enumerate(pairs):
        assert f"test.neg.c{i}" in refuted, f"{ver}: a false expectation did not refute"
        assert f"test.pos.c{i}" not in refuted, f"{ver}: a true expectation was refuted"
    assert code == 1  # something refuted


def test_source_check_supports_and_refutes(project: Path, tmp_path: Path) -> None:
    repo = tmp_path / "up"
    sha = commit_files(repo, {"k.h": "int a;\natomicAdd(dq_accum, x);\nint b;\n"}, "one")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")
    digest = lines_sha256((repo / "k.h").read_bytes(), 2, 2)[0]
    anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": [2, 2], "sha256": digest}
    base = claim("x.y")["anchors"][0]
    write_claims(project, "src", [
        claim("test.src.ok", label="source-backed", anchors=[base, anchor],
              checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]}}]),
        claim("test.src.neg", label="source-backed", anchors=[base, anchor],
              checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicSub"]}}]),
        claim("test.src.badhash", label="source-backed", anchors=[base, {**anchor, "sha256": "1" * 64}],
              checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]}}]),
    ])
    offline = kb_subprocess(project, "verify", "--plan", "--json")
    rows = {r["check"]: r for r in json.loads(offline.stdout)}
    assert rows["test.src.ok#0"]["action"] == "skip"
    assert "KB_CLONE_TESTREPO" in rows["test.src.ok#0"]["why"]
    res = kb_subprocess(project, "verify", "--json", env={"KB_CLONE_TESTREPO": str(repo)})
    summary = json.loads(res.stdout)
    assert set(summary["refuted"]) >= {"test.src.neg", "test.src.badhash", "test.arith.wrong"}
    assert "test.src.ok" not in summary["refuted"]


HARNESS = '''
import os, time
from kb.verify.registry import Outcome, Params, verifier


class P(Params):
    seconds: float = 0


@verifier("test.crash", kind="cpu-check", params=P, timeout_s=30)
def crash(p, ctx):
    """Dies without a word, as a segfault or OOM kill would."""
    os._exit(7)


@verifier("test.hang", kind="cpu-check", params=P, timeout_s=2)
def hang(p, ctx):
    """Never returns."""
    time.sleep(p.seconds)
    return Outcome(measurements={"value": (1, "")})


@verifier("test.raise", kind="cpu-check", params=P, timeout_s=30)
def boom(p, ctx):
    """Raises like a CUDA error would."""
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
'''


def test_harness_faults_are_errors_not_evidence(project: Path) -> None:
    (project / "verifiers" / "harness_test.py").write_text(HARNESS)
    exp = {"value": {"equals": 1}}
    write_claims(project, "harness", [
        claim("test.h.crash", checks=[{"verifier": "test.crash", "params": {}, "expect": exp}]),
        claim("test.h.hang", checks=[{"verifier": "test.hang", "params": {"seconds": 60}, "expect": exp}]),
        claim("test.h.raise", checks=[{"verifier": "test.raise", "params": {}, "expect": exp}]),
    ])
    code, summary = _verify(project, "--jobs", "1")
    assert code == 3
    errors = {e["check"]: e["reason"] for e in summary["errors"]}
    assert "exited with code 7" in errors["test.h.crash#0"]
    assert "timed out after 2 s" in errors["test.h.hang#0"]
    assert "illegal memory access" in errors["test.h.raise#0"]
    # The suite went on: the ordinary claims still ran after the faults.
    assert "test.arith.wrong" in summary["refuted"]
    shown = json.loads(kb_subprocess(project, "show", "test.h.crash", "--json").stdout)
    overall = next(s for s in shown["status"] if s["hardware_class"] == "*")
    assert overall["status"] == "unverified" and "harness error" in overall["reason"]


def test_cache_then_force_and_stale(project: Path) -> None:
    _, first = _verify(project)
    assert first["ran"] == 2 and first["cached"] == 0
    _, again = _verify(project)
    assert again["ran"] == 0 and again["cached"] == 2
    _, forced = _verify(project, "--force")
    assert forced["ran"] == 2
    files = list((project / "evidence").rglob("*.json"))
    assert len(files) == 2  # append-only: one new batch per run that executed something
    # Editing a claim's statement makes its evidence stale until it is re-checked.
    path = project / "claims" / "good.yaml"
    path.write_text(path.read_text().replace("Two plus two equals four", "Two plus two equals 4"))
    shown = json.loads(kb_subprocess(project, "show", "test.arith.four", "--json").stdout)
    assert any(s["status"] == "stale" for s in shown["status"])
    _, after = _verify(project)
    assert after["ran"] == 1


def test_evidence_import_merges_by_content(project: Path, tmp_path: Path) -> None:
    _verify(project)
    batch = next((project / "evidence").rglob("*.json"))
    other = tmp_path / "other"
    other.mkdir()
    moved = other / batch.name
    batch.rename(moved)
    assert kb_subprocess(project, "evidence", "import", str(moved)).returncode == 0
    again = kb_subprocess(project, "evidence", "import", str(moved))
    assert "imported 0 new run(s); 2 already known" in again.stderr
    tampered = json.loads(moved.read_text())
    tampered["runs"][0]["verdict"] = "supports" if tampered["runs"][0]["verdict"] == "refutes" else "refutes"
    bad = other / "bad.json"
    bad.write_text(json.dumps(tampered))
    res = kb_subprocess(project, "evidence", "import", str(bad))
    assert res.returncode == 2 and "does not match its content" in res.stderr


def test_ctrl_c_keeps_finished_runs_and_a_consistent_index(project: Path) -> None:
    import os
    import signal
    import sys
    import time

    (project / "verifiers" / "harness_test.py").write_text(HARNESS)
    exp = {"value": {"equals": 1}}
    write_claims(project, "zz-harness", [
        claim("test.h.slow", checks=[{"verifier": "test.hang", "params": {"seconds": 25}, "expect": exp}]),
    ])
    env = {**os.environ, "KB_ROOT": str(project), "KB_DB": str(project / ".kb" / "kb.db"),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "kb", "verify", "--jobs", "1", "--timeout", "60"],
                            env=env, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Interrupt once the two arithmetic runs are journaled (the slow one is then running), not after a fixed
    # sleep: on a loaded machine start-up alone can outlast any fixed delay.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        journaled = sum(len(f.read_text().splitlines()) for f in project.rglob(".inflight-*.jsonl"))
        if journaled >= 2:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: 2 finished run(s) recorded" in err
    assert kb_subprocess(project, "validate").returncode == 0  # evidence files are whole
    runs = [r for f in (project / "evidence").rglob("*.json") for r in json.loads(f.read_text())["runs"]]
    assert sorted(r["claim_id"] for r in runs) == ["test.arith.four", "test.arith.wrong"]


def test_source_check_online_fetch(project: Path, tmp_path: Path) -> None:
    """--online reads a GitHub-hosted file at the pinned SHA over HTTP (a loopback server here)."""
    import http.server
    import threading

    sha = "a" * 40
    body = b"int a;\natomicAdd(dq_accum, x);\nint b;\n"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == f"/owner/repo/{sha}/k.h":
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path.endswith("/broken.h"):
                self.send_response(500)
                self.end_headers()
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (project / "sources" / "testrepo.yaml").write_text(
            f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://github.com/owner/repo\n    pins:\n      main: {sha}\n")
        digest = lines_sha256(body, 2, 2)[0]
        base = claim("x.y")["anchors"][0]
        anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": [2, 2], "sha256": digest}

        def src_claim(cid: str, **a: object) -> dict:
            return claim(cid, label="source-backed", anchors=[base, {**anchor, **a}],
                         checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]}}])

        write_claims(project, "src", [src_claim("test.web.ok"), src_claim("test.web.gone", path="gone.h"),
                                      src_claim("test.web.broken", path="broken.h")])
        env = {"KB_RAW_BASE": f"http://127.0.0.1:{server.server_address[1]}", "KB_HTTP_CACHE": str(tmp_path / "cache")}
        offline = json.loads(kb_subprocess(project, "verify", "--plan", "--json", env=env).stdout)
        assert all(r["action"] == "skip" for r in offline if r["check"].startswith("test.web"))
        res = kb_subprocess(project, "verify", "--online", "--json", env=env)
        summary = json.loads(res.stdout)
        assert "test.web.gone" in summary["refuted"]  # 404 at a pinned SHA: the anchor is wrong
        assert "test.web.ok" not in summary["refuted"]
        errors = {e["check"]: e["reason"] for e in summary["errors"]}
        assert "HTTP 500" in errors["test.web.broken#0"]  # a server fault is a harness error, not evidence
        assert (tmp_path / "cache" / "raw" / "owner" / "repo" / sha / "k.h").read_bytes() == body
    finally:
        server.shutdown()


@pytest.mark.skipif(any(__import__("kb.verify.hw", fromlist=["find_tool"]).find_tool(t) is None
                        for t in ("nvcc", "cuobjdump", "nvdisasm")),
                    reason="needs nvcc, cuobjdump and nvdisasm (CUDA toolkit or nvidia-cuda-* wheels)")
def test_toolchain_compile_supports_and_refutes(project: Path) -> None:
    code, hopper_only = "test-exp2", "test-setmaxnreg"  # tests/fixtures/snippets/cuda/

    def chk(cid: str, params: dict, expect: dict) -> dict:
        return claim(cid, checks=[{"verifier": "toolchain.compile", "params": params, "expect": expect}])

    sass = {"code": code, "arch": "sm_90", "flags": ["--use_fast_math"], "inspect": "sass"}
    write_claims(project, "tc", [
        chk("test.tc.mufu", {**sass, "tokens": ["MUFU.EX2"]}, {"tokens_found": {"is": True}}),
        chk("test.tc.neg-mufu", {**sass, "tokens": ["HGMMA"]}, {"tokens_found": {"is": True}}),
        chk("test.tc.sm80-rejects", {"code": hopper_only, "arch": "sm_80"}, {"compiles": {"is": False}}),
        chk("test.tc.neg-sm80-accepts", {"code": hopper_only, "arch": "sm_80"}, {"compiles": {"is": True}}),
    ])
    _, summary = _verify(project)
    assert summary["errors"] == []
    assert {"test.tc.neg-mufu", "test.tc.neg-sm80-accepts"} <= set(summary["refuted"])
    assert not {"test.tc.mufu", "test.tc.sm80-rejects"} & set(summary["refuted"])


def _dump(db_path: Path) -> tuple[list, list, str]:
    import sqlite3

    con = sqlite3.connect(db_path)
    try:
        status = con.execute("SELECT claim_id, hardware_class, status, reason, run_ids FROM status ORDER BY 1, 2").fetchall()
        runs = con.execute("SELECT run_id, claim_id, verdict FROM runs ORDER BY 1").fetchall()
        fp = con.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()[0]
    finally:
        con.close()
    return status, runs, fp


def test_verify_records_into_the_index_it_was_handed_and_equals_a_rebuild(project: Path) -> None:
    """`kb verify` updates the open index in place (no rebuild), and the result equals a rebuild from the files."""
    from kb.config import load_config
    from kb.index.store import input_fingerprint

    code, _ = _verify(project)
    assert code == 1  # test.arith.wrong refutes
    db = project / ".kb" / "kb.db"
    status, runs, fp = _dump(db)
    assert len(runs) == 2 and {r[2] for r in runs} == {"supports", "refutes"}
    # The stored fingerprint was advanced over the new evidence file, so the next command does not rebuild...
    assert fp == input_fingerprint(load_config(project).root)
    # ...and a forced rebuild from the files gives exactly what the session wrote.
    res = kb_subprocess(project, "claims", "--json")
    assert res.returncode == 0
    assert _dump(db)[:2] == (status, runs)
    rebuilt_db = project / ".kb" / "rebuilt.db"
    res = kb_subprocess(project, "claims", "--json", env={"KB_DB": str(rebuilt_db)})
    assert res.returncode == 0, res.stderr
    assert _dump(rebuilt_db)[:2] == (status, runs)


def test_verify_leaves_the_fingerprint_when_other_inputs_changed_mid_run(project: Path) -> None:
    """An input edited during a run must not be hidden by the session's fingerprint update."""
    from kb.config import load_config
    from kb.index.store import Index, input_fingerprint, open_index
    from kb.records.models import Run

    cfg = load_config(project, str(project / ".kb" / "kb.db"))
    index = open_index(cfg)
    assert isinstance(index, Index) and index.fingerprint == input_fingerprint(project)
    run = next(iter(index.runs()), None)
    assert run is None
    # Simulate a claim file edited while checks ran, then record a run.
    write_claims(project, "late", [claim("test.late.added")])
    good = index.corpus().claims["test.arith.four"]
    from kb.verify.evidence import write_batch
    from kb.verify.registry import load_verifiers

    reg = load_verifiers(cfg.verifiers_dir)
    r = Run(claim_id=good.id, claim_hash=good.content_hash(), check_index=0, verifier="arith.eval",
            verifier_hash=reg["arith.eval"].code_hash(), params=good.checks[0].params, expect={},
            verdict="supports", reason="test", hardware_class="cpu", environment={},
            started="2026-01-01T00:00:00+00:00", duration_s=0.0, log="")
    path = write_batch(project, [r])
    index.record_runs([r], [path], reg)
    _, runs, fp = _dump(cfg.db_path)
    assert len(runs) == 1
    assert fp != input_fingerprint(project)  # left stale: the next command rebuilds and sees test.late.added
    assert open_index(cfg).rebuilt


def test_in_process_verify_gives_ctrl_c_back(run_kb) -> None:
    """A library or CliRunner caller keeps its SIGINT handler: the write phase's SIG_IGN does not leak."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    run_kb("verify")
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
