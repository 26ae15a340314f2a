"""`kb repin` on real git repositories: moves and renames re-anchor, edits and deletions stay behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from kb.cli import cli
from kb.verify.hw import find_tool
from tests.test_audit_support import Repos, build_repos, claim, commit_tree, drift_claims, new_repo, write_project


def _kb(root: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--root", str(root), "--db", str(root / "kb.db"), *args], catch_exceptions=False)


@pytest.fixture()
def repos(tmp_path: Path) -> Repos:
    return build_repos(tmp_path / "repos")


def _claims(root: Path) -> dict[str, dict]:
    return {c["id"]: c for c in yaml.safe_load((root / "claims" / "audit.yaml").read_text())["claims"]}


def test_repin_dry_run_then_write(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos), tracking=["v1"])
    before = {p: p.read_text() for p in (root / "claims" / "audit.yaml", root / "sources" / "all.yaml")}
    res = _kb(root, "repin", "code", "v1", "--to", repos.head, "--json")
    assert res.exit_code == 1, res.output  # some claims changed upstream: a finding
    doc = json.loads(res.stdout)
    outcome = {c["id"]: c["outcome"] for c in doc["claims"]}
    assert {k for k, v in outcome.items() if v == "advanced"} == {
        "t.repo.unchanged", "t.repo.untouched-file", "t.repo.moved", "t.repo.renamed"}
    assert {k for k, v in outcome.items() if v == "changed upstream"} == {
        "t.repo.edited", "t.repo.deleted", "t.repo.symbol-moved", "t.repo.symbol-rewritten", "t.repo.bad-hash"}
    assert "src/new_name.h" in doc["diff"] and f"v1: {repos.head}" in doc["diff"]
    assert {p: p.read_text() for p in before} == before  # dry run wrote nothing
    res = _kb(root, "repin", "code", "v1", "--to", repos.head, "--write")
    assert res.exit_code == 1 and "wrote 2 file(s)" in res.stderr
    claims = _claims(root)
    moved = claims["t.repo.moved"]["anchors"][1]
    assert (moved["sha"], moved["lines"]) == (repos.head, [12, 14])
    assert claims["t.repo.renamed"]["anchors"][1]["path"] == "src/new_name.h"
    assert claims["t.repo.edited"]["anchors"][1]["sha"] == repos.pin  # left behind
    src = next(s for s in yaml.safe_load((root / "sources" / "all.yaml").read_text())["sources"] if s["id"] == "code")
    kept = f"v1-{repos.pin[:7]}"
    assert src["pins"] == {"v1": repos.head, kept: repos.pin} and src["tracking"] == ["v1", kept]
    assert _kb(root, "validate").exit_code == 0
    # The next audit: re-anchored claims are unchanged at the new pin; the ones left behind read stale.
    _kb(root, "audit", "--offline")
    rows = {r["id"]: r for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert rows["t.repo.moved"]["status"] != "stale" and rows["t.repo.renamed"]["status"] != "stale"
    assert rows["t.repo.edited"]["status"] == "stale"


def test_fixed_pin_is_not_repinned(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos))  # v1 fixed
    res = _kb(root, "repin", "code", "v1", "--to", repos.head)
    assert res.exit_code == 2 and "fixed pin" in res.stderr
    assert _kb(root, "repin", "code", "v9", "--to", repos.head).exit_code == 2
    assert _kb(root, "repin", "code", "v1", "--to", "no-such-ref").exit_code == 2


def test_checks_that_fail_at_the_new_ref_keep_the_claim_behind(tmp_path: Path, repos: Repos,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if find_tool("g++") is None:
        pytest.skip("needs g++")
    lib = new_repo(tmp_path / "lib")
    pin = commit_tree(lib, {"rule.h": "// rule.h: the rule\ninline int rule(int x) { return x * 2; }\n"}, "pin")
    head = commit_tree(lib, {"rule.h": "// rule.h: the rule\ninline int rule(int x) { return x * 3; }\n"}, "change")
    # Both revisions of this test repository may be compiled and run (an operator's setting, not data).
    monkeypatch.setenv("KB_TRUST_PINS", f"lib@{pin},lib@{head}")
    digest = __import__("kb.pinned.notes", fromlist=["x"]).lines_sha256(b"// rule.h: the rule\n", 1, 1)[0]
    a = {"source": "lib", "sha": pin, "path": "rule.h", "lines": [1, 1], "sha256": digest}
    c = claim("t.lib.rule", a)
    c.pop("review")
    c["checks"] = [{"verifier": "code.host-exec", "params": {"anchor": 1, "functions": ["rule"], "call": "rule(x)",
                                                             "grid": {"x": [1, 2]}, "point": {"x": 2}},
                    "expect": {"value": {"equals": 4}}}]
    extra = [{"id": "lib", "kind": "repo", "url": "https://example.invalid/lib", "pins": {"main": pin}, "tracking": ["main"]}]
    root = write_project(tmp_path / "proj", repos, [c], extra_sources=extra,
                         clones={"fa-notes": str(repos.notes), "code": str(repos.code), "lib": str(lib)})
    doc = json.loads(_kb(root, "repin", "lib", "main", "--to", head, "--json").stdout)
    [o] = doc["claims"]
    assert o["outcome"] == "checks fail at the new ref" and "6 (expected 4)" in o["detail"]
    assert _kb(root, "repin", "lib", "main", "--to", head, "--write").exit_code == 1
    assert _claims(root)["t.lib.rule"]["anchors"][1]["sha"] == pin  # stays at the commit its checks hold for
    lib_src = next(s for s in yaml.safe_load((root / "sources" / "all.yaml").read_text())["sources"] if s["id"] == "lib")
    assert lib_src["pins"] == {"main": head, f"main-{pin[:7]}": pin}
    assert not list((root / "evidence").rglob("*.json")) or all(
        "t.lib.rule" not in p.read_text() for p in (root / "evidence").rglob("*.json"))


def test_notes_repin_stales_exactly_the_changed_sections(tmp_path: Path, repos: Repos) -> None:
    claims = [c for c in drift_claims(repos) if c["id"].startswith("t.notes.") or c["id"] == "t.repo.unchanged"]
    root = write_project(tmp_path / "proj", repos, claims)
    doc = json.loads(_kb(root, "repin", "fa-notes", "commit", "--to", repos.notes_head, "--json").stdout)
    outcome = {c["id"]: c["outcome"] for c in doc["claims"]}
    assert outcome == {"t.repo.unchanged": "advanced", "t.notes.edited": "changed upstream",
                       "t.notes.gone": "changed upstream"}
    edited = next(c for c in doc["claims"] if c["id"] == "t.notes.edited")
    assert "#beta" in edited["detail"]
    assert "-Beta says dQ is accumulated with atomicAdd." in edited["diff"]  # the changed section, with its diff
    assert _kb(root, "repin", "fa-notes", "commit", "--to", repos.notes_head, "--write").exit_code == 1
    notes = next(s for s in yaml.safe_load((root / "sources" / "all.yaml").read_text())["sources"] if s["id"] == "fa-notes")
    assert notes["commit"] == repos.notes_head
    _kb(root, "audit", "--offline")
    rows = {r["id"]: r["status"] for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert rows["t.notes.edited"] == "stale" and rows["t.notes.gone"] == "stale"
    assert rows["t.repo.unchanged"] != "stale"
    # The section that is new at the re-pinned commit has no claim: coverage lists it.
    cov = _kb(root, "coverage", "--json")
    [note] = json.loads(cov.stdout)
    assert "later" in note["missing"] and cov.exit_code == 1
