"""`kb coverage` against a real notes repository built in the test."""

from __future__ import annotations

import json
from pathlib import Path

from kb.pinned.notes import find_section
from tests.conftest import claim, commit_files, kb_subprocess, write_claims

NOTE = """# Title

## 1. Checked section

FA2 uses 128 threads.

## 2. Parent only

### 2.1 Child with a fact

The grid is (N/128, B, H).

## 3. Plan

Run it on a GPU later.

## 4. Forgotten

dQ is accumulated in FP32.
"""


def test_coverage_reports_missing_allowed_and_structural(project: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    sha = commit_files(notes, {"docs/notes/x.md": NOTE}, "notes")
    (project / "sources" / "notes.yaml").write_text(
        f"sources:\n  - id: fa-notes\n    kind: notes\n    repo: https://github.com/example/notes\n    commit: {sha}\n")

    def anchor(slug: str) -> dict:
        return {"source": "fa-notes", "path": "docs/notes/x.md", "heading": slug,
                "sha256": find_section(NOTE, slug).sha256}

    for f in (project / "claims").glob("*.yaml"):
        f.unlink()
    write_claims(project, "x", [claim("test.cov.a", anchors=[anchor("1-checked-section")]),
                                claim("test.cov.b", anchors=[anchor("21-child-with-a-fact")])])
    (project / "docs").mkdir()
    (project / "docs" / "coverage-allowlist.yaml").write_text(
        "files:\n  docs/notes/x.md:\n    3-plan: a plan, not assertions\n")
    res = kb_subprocess(project, "coverage", "--json", env={"KB_CLONE_FA_NOTES": str(notes)})
    assert res.returncode == 1, res.stderr
    (cov,) = json.loads(res.stdout)
    assert cov["covered"] == ["1-checked-section", "2-parent-only", "21-child-with-a-fact"]
    assert cov["allowed"] == {"3-plan": "a plan, not assertions"}
    assert cov["missing"] == ["4-forgotten"]
    # The authoring helper reads the same clone and prints what an anchor must record.
    shown = kb_subprocess(project, "anchor", "fa-notes", "docs/notes/x.md", "4-forgotten",
                          env={"KB_CLONE_FA_NOTES": str(notes)})
    assert find_section(NOTE, "4-forgotten").sha256 in shown.stdout
    missing = kb_subprocess(project, "anchor", "fa-notes", "docs/notes/x.md", "no-such", env={"KB_CLONE_FA_NOTES": str(notes)})
    assert missing.returncode == 2 and "no heading with slug" in missing.stderr


def _no_clone_project(project: Path, tmp_path: Path) -> str:
    """The same notes, registered at their commit, with no local clone of them anywhere."""
    notes = tmp_path / "notes"
    sha = commit_files(notes, {"docs/notes/x.md": NOTE}, "notes")
    (project / "sources" / "notes.yaml").write_text(
        f"sources:\n  - id: fa-notes\n    kind: notes\n    repo: https://github.com/example/notes\n    commit: {sha}\n")
    for f in (project / "claims").glob("*.yaml"):
        f.unlink()
    write_claims(project, "x", [claim("test.cov.a", anchors=[{
        "source": "fa-notes", "path": "docs/notes/x.md", "heading": "1-checked-section",
        "sha256": find_section(NOTE, "1-checked-section").sha256}])])
    return sha


def test_coverage_stays_offline_unless_asked(project: Path, tmp_path: Path) -> None:
    """No clone: offline (the default) it makes no request and says what to do (exit 2); --online it reads the
    notes through kb's HTTP client (gzip-encoded here) and caches them, so the next offline run works; --online
    against an unreachable host (a closed loopback port) is exit 3."""
    import gzip

    from tests.test_http_client import Served, closed_port

    sha = _no_clone_project(project, tmp_path)
    served = Served()
    path = f"/example/notes/{sha}/docs/notes/x.md"
    served.routes[path] = (200, gzip.compress(NOTE.encode()), {"Content-Encoding": "gzip"})
    env = {"KB_RAW_BASE": served.base, "KB_HTTP_CACHE": str(tmp_path / "http"), "KB_HTTP_RETRIES": "0"}
    try:
        offline = kb_subprocess(project, "coverage", "--json", env=env)
        assert offline.returncode == 2, offline.stderr
        assert "kb sources fetch fa-notes" in offline.stderr and "--online" in offline.stderr
        assert served.hits == {}  # not one request without --online
        online = kb_subprocess(project, "coverage", "--online", "--json", env=env)
        assert online.returncode == 1, online.stderr  # it ran: sections 2-4 have no claim
        (cov,) = json.loads(online.stdout)
        assert cov["covered"] == ["1-checked-section"] and "4-forgotten" in cov["missing"]
        assert served.hits == {path: 1}
        again = kb_subprocess(project, "coverage", "--json", env=env)  # offline, from the cache of the online read
        assert again.returncode == 1 and json.loads(again.stdout) == [cov]
        assert served.hits == {path: 1}
    finally:
        served.server.shutdown()
        served.server.server_close()
    dead = {**env, "KB_RAW_BASE": f"http://127.0.0.1:{closed_port()}", "KB_HTTP_CACHE": str(tmp_path / "empty")}
    unreachable = kb_subprocess(project, "coverage", "--online", env=dead)
    assert unreachable.returncode == 3 and "coverage could not run" in unreachable.stderr
    assert kb_subprocess(project, "coverage", env=dead).returncode == 2  # offline: guidance, not a network fault
