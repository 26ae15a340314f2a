"""Source checks that pin what is asserted: order, value patterns, and the commit the anchor pins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb.pinned.notes import lines_sha256
from tests.conftest import claim, commit_files, kb_subprocess, write_claims

pytest.importorskip("torch", reason="kb verify runs workers")

TEXT = "#if ARCH >= 800\n  kBlockM = 128;\n  first_call();\n  second_call();\n#else\n  kBlockM = 64;\n#endif\n"


def _setup(project: Path, tmp_path: Path) -> tuple[Path, str, dict]:
    repo = tmp_path / "up"
    first = commit_files(repo, {"k.h": TEXT}, "one")
    sha = commit_files(repo, {"other.txt": "x\n"}, "two")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n"
        f"      main: {sha}\n      first: {first}\n")
    anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": [1, 7],
              "sha256": lines_sha256(TEXT.encode(), 1, 7)[0]}
    return repo, first, anchor


def test_order_value_and_pinned_commit_can_refute(project: Path, tmp_path: Path) -> None:
    repo, first, anchor = _setup(project, tmp_path)
    note = claim("x")["anchors"][0]

    def lines(cid: str, **params: object) -> dict:
        return claim(cid, label="source-backed", anchors=[note, anchor],
                     checks=[{"verifier": "source.lines", "params": {"anchor": 1, **params}}])

    def commit(cid: str, sha: str, anchor_sha: str) -> dict:
        return claim(cid, label="source-backed", anchors=[note, {"source": "testrepo", "sha": anchor_sha}],
                     checks=[{"verifier": "source.commit", "params": {"anchor": 1, "source": "testrepo", "sha": sha,
                                                                        "field": "subject"}, "expect": {"value": {"equals": "one"}}}])

    write_claims(project, "src", [
        # A token set that matches both branches cannot tell which value applies; a pattern with the value can.
        lines("t.tokens.both", tokens=["kBlockM"]),
        lines("t.pattern.ok", tokens=["kBlockM"], patterns=[r"ARCH >= 800\s*\n\s*kBlockM = 128"]),
        lines("t.pattern.neg", tokens=["kBlockM"], patterns=[r"ARCH >= 800\s*\n\s*kBlockM = 64"]),
        lines("t.order.ok", tokens=["first_call", "second_call"], ordered=True),
        lines("t.order.neg", tokens=["second_call", "first_call"], ordered=True),
        lines("t.order.unordered", tokens=["second_call", "first_call"]),  # passes: a set says nothing of order
        commit("t.commit.ok", first, first),
        commit("t.commit.neg", first, anchor["sha"]),  # metadata of another commit than the pin
    ])
    summary = json.loads(kb_subprocess(project, "verify", "--json", env={"KB_CLONE_TESTREPO": str(repo)}).stdout)
    assert [e["check"] for e in summary["errors"]] == ["t.commit.neg#0"]  # a mis-built check is no evidence
    assert set(summary["refuted"]) >= {"t.pattern.neg", "t.order.neg"}
    assert not {"t.tokens.both", "t.pattern.ok", "t.order.ok", "t.order.unordered", "t.commit.ok"} & set(summary["refuted"])
    assert "but anchor 1 pins" in summary["errors"][0]["reason"]
