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
