"""`kb verify --fail-on {new,refuted,never}` and its baseline, STATUS.json (#27): scripts can chain `kb verify`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import REPO, claim, kb_subprocess, write_claims


def test_fail_on_new_compares_with_the_exported_baseline(project: Path, run_kb) -> None:
    # No baseline yet: every refuted claim is new (test.arith.wrong is refuted by design).
    res = run_kb("verify")
    assert res.exit_code == 1 and "no baseline at" in res.stderr
    assert run_kb("export", "status").exit_code == 0
    base = json.loads((project / "STATUS.json").read_text())
    assert base["claims"] == {"test.arith.four": "verified", "test.arith.wrong": "refuted",
                              "test.review.only": "review-only"}
    assert run_kb("export", "status", "--check").exit_code == 0
    # The known refutation is on record: new passes, refuted still fails on it, never passes.
    assert run_kb("verify").exit_code == 0  # the default is new
    assert run_kb("verify", "--fail-on", "new").exit_code == 0
    res = run_kb("verify", "--fail-on", "refuted")
    assert res.exit_code == 1
    assert run_kb("verify", "--fail-on", "never").exit_code == 0
    # A verified claim's verdict gets worse: new fails and names it; never still passes.
    write_claims(project, "good", [
        claim("test.arith.four", checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                          "expect": {"value": {"equals": 5}}}]),
        claim("test.arith.wrong", statement="Two plus two equals five, stated by a note.",
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 5}}}],
              cause={"kind": "note", "why": "The note says five; two plus two is four (a test finding)."}),
        claim("test.review.only", checks=[], review="Design rationale; nothing executable decides it.",
              depends_on=["test.arith.four"]),
    ])
    res = run_kb("verify", "--fail-on", "new")
    assert res.exit_code == 1
    assert "worse than STATUS.json: test.arith.four: verified -> refuted" in res.stderr
    assert "test.arith.wrong" not in res.stderr.split("worse than", 1)[1]
    assert run_kb("verify", "--fail-on", "never").exit_code == 0
    # Only the selected claims are compared.
    assert run_kb("verify", "--claim", "test.arith.wrong").exit_code == 0
    # The stale STATUS.json is what --check reports once the verdicts moved.
    res = run_kb("export", "status", "--check")
    assert res.exit_code == 1 and "STATUS.json is out of date" in res.stderr


def test_a_broken_or_missing_baseline_is_bad_input(project: Path, run_kb) -> None:
    (project / "STATUS.json").write_text('{"format": 1, "claims": {"test.arith.four": "fine"}}')
    res = run_kb("verify")
    assert res.exit_code == 2 and "STATUS.json:1: field claims.test.arith.four" in res.output
    (project / "STATUS.json").write_text("{not json")
    res = run_kb("verify")
    assert res.exit_code == 2 and "STATUS.json:1: not a kb baseline" in res.output
    res = run_kb("verify", "--baseline", str(project / "nope.json"))
    assert res.exit_code == 2 and "no such file" in res.output
    assert run_kb("verify", "--fail-on", "never").exit_code == 0  # the baseline is read only for new


def test_worse_is_a_new_refutation_or_a_lost_verification() -> None:
    from kb.export.baseline import regressions, worse

    assert worse("verified", "refuted") and worse(None, "refuted") and worse("needs-hardware", "refuted")
    assert worse("verified", "inconclusive") and worse("verified", "stale") and worse("verified", "needs-hardware")
    assert not worse("refuted", "refuted") and not worse(None, "verified") and not worse("inconclusive", "stale")
    assert not worse("verified", "review-only") and not worse("refuted", "verified")
    got = regressions({"a": "verified", "b": "refuted"}, {"a": "inconclusive", "b": "refuted", "c": "refuted"})
    assert [str(r) for r in got] == ["a: verified -> inconclusive", "c: not in the baseline -> refuted"]
    assert regressions({"a": "verified"}, {"a": "inconclusive", "c": "refuted"}, ["c"])[0].claim_id == "c"


def _corpus_copy(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for part in ("claims", "sources", "evidence", "verifiers", "docs"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__", ".inflight-*"))
    for name in ("STATUS.md", "STATUS.json"):
        shutil.copy2(REPO / name, root / name)
    return root


def test_committed_corpus_passes_fail_on_new_and_a_worse_verdict_fails(tmp_path: Path) -> None:
    """On a copy of the committed corpus: no claim is worse than the committed STATUS.json; one mutated claim is."""
    root = _corpus_copy(tmp_path)
    # The whole corpus against its baseline, without running anything: the index of the committed files.
    from kb.config import load_config
    from kb.export.baseline import current, read, regressions
    from kb.index.store import open_index

    idx = open_index(load_config(root, str(root / ".kb" / "kb.db")))
    base = read(root / "STATUS.json")
    assert base is not None and len(base) == len(current(idx.db))
    assert regressions(base, current(idx.db)) == []
    # A known refutation, reused from the committed evidence: new passes, refuted fails.
    refuted = "fa1.occ.d128-smem-bound-four"
    assert base[refuted] == "refuted"
    res = kb_subprocess(root, "verify", "--claim", refuted, "--fail-on", "new")
    assert res.returncode == 0, res.stderr
    assert f"refuted: {refuted}" in res.stderr  # it is refuted, and on record: not new
    # A verified claim made false: its arithmetic check now refutes, and new names it.
    target = "fa2.det.example-dq-image-128mib"
    assert base[target] == "verified"
    path = root / "claims" / "current-implementation-and-determinism.yaml"
    doc = yaml.safe_load(path.read_text())
    rec = next(c for c in doc["claims"] if c["id"] == target)
    rec["checks"][0]["expect"] = {"value": {"equals": 129}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = kb_subprocess(root, "verify", "--claim", target, "--fail-on", "new")
    assert res.returncode == 1, res.stderr
    # (refuted, or stale where the claim's other check, at the old content, could not re-run without a clone)
    assert f"worse than STATUS.json: {target}: verified -> " in res.stderr
    assert f"refutes: {target}#0" in res.stderr
