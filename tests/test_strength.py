"""Evidence strength: graded by rule from the verifier, the expectation and the hardware; shown everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.index.strength import GRADES, grade, strongest
from kb.verify.registry import load_verifiers
from tests.conftest import REPO, claim, kb_subprocess, write_claims

REG = load_verifiers(REPO / "verifiers")


@pytest.mark.parametrize(("verifier", "expect", "hw", "want"), [
    ("gpu.bitwise-repeat", {"distinct_dq": {}}, "NVIDIA H200 sm_90", "measured"),
    ("code.constexpr", {"smem": {}}, "cpu", "derived"),
    ("code.host-exec", {"value": {}}, "cpu", "derived"),
    ("code.py-exec", {"disagreements": {}}, "cpu", "derived"),
    ("toolchain.compile", {"compiles": {}}, "cpu", "derived"),
    ("math.causal-tiles", {"tiles_visited": {}}, "cpu", "derived"),
    ("math.fp-sum-order", {"order_dependent": {}}, "cpu", "derived"),
    ("source.lines", {}, "cpu", "cited"),
    ("source.commit", {"value": {}}, "cpu", "cited"),
    ("math.online-softmax", {"max_abs_err": {}}, "cpu", "restated"),  # a built-in identity: cannot read the note
    ("math.identity", {"max_abs_err": {}}, "cpu", "derived"),  # reads the statement's formula
    ("heuristic.num-splits", {"num_splits": {}}, "cpu", "restated"),
    ("arith.eval", {"value": {}}, "cpu", "restated"),
])
def test_each_verifier_gets_its_grade_by_rule(verifier: str, expect: dict, hw: str, want: str) -> None:
    got, why = grade(REG[verifier], expect, hw)
    assert got == want, why
    assert got in GRADES


def test_strongest_orders_the_grades() -> None:
    assert strongest(["restated", "cited", "derived"]) == "derived"
    assert strongest(["restated", "measured"]) == "measured"
    assert strongest([]) is None


def test_strength_in_claims_show_status_and_prov(project: Path) -> None:
    pytest.importorskip("torch", reason="kb verify runs workers")
    write_claims(project, "more", [
        claim("test.tiles", checks=[{"verifier": "math.causal-tiles", "params": {"n": 512, "block_q": 128, "block_k": 128},
                                     "expect": {"tiles_visited": {"equals": 10}}}]),
    ])
    kb_subprocess(project, "verify", "--json")
    rows = {r["id"]: r for r in json.loads(kb_subprocess(project, "claims", "--json").stdout)}
    assert rows["test.arith.four"]["strength"] == "restated"
    assert rows["test.arith.wrong"]["status"] == "refuted" and rows["test.arith.wrong"]["strength"] == "restated"
    assert rows["test.tiles"]["strength"] == "derived"
    assert rows["test.review.only"]["strength"] is None
    derived = json.loads(kb_subprocess(project, "claims", "--strength", "derived", "--json").stdout)
    assert [r["id"] for r in derived] == ["test.tiles"]
    assert "[derived]" in kb_subprocess(project, "show", "test.tiles").stdout
    bad = kb_subprocess(project, "claims", "--strength", "strong")
    assert bad.returncode == 2
    kb_subprocess(project, "export", "status")
    status = (project / "STATUS.md").read_text()
    assert "## Evidence strength" in status and "| cross | 4 | 0 | 1 | 0 | 2 | 1 |" in status
    prov = json.loads(kb_subprocess(project, "export", "prov").stdout)
    assert prov["entity"]["kb:test.tiles"]["kb:evidenceStrength"] == "derived"
    assert "kb:evidenceStrength" not in prov["entity"]["kb:test.review.only"]
