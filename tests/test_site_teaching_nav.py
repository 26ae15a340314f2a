"""The site's navigation links the teaching pages exactly when the export writes them."""

from __future__ import annotations

import re
from pathlib import Path

from kb.config import load_config
from kb.export.site.build import build_site
from kb.index.store import open_index
from tests.conftest import NOTE_ANCHOR, claim, write_claims

NAV = re.compile(r'<nav aria-label="Site">(.*?)</nav>', re.S)


def _nav(page: Path) -> str:
    m = NAV.search(page.read_text())
    assert m, f"{page} has no site navigation"
    return m.group(1)


def _export(root: Path) -> Path:
    cfg = load_config(root=root, db=str(root / "kb.db"))
    out = root / "site"
    build_site(open_index(cfg).db, cfg, out)
    return out


def test_no_teaching_claims_no_link(project: Path) -> None:
    site = _export(project)
    assert not (site / "teaching").exists()
    assert "teaching/" not in _nav(site / "index.html")


def test_teaching_claims_link_from_every_level(project: Path) -> None:
    sha = "e15108108b363ec04d8e802df10de0d54dd89a4f"  # the pin of mog9-flashattention-cupy in sources/teaching.yaml
    write_claims(project, "teach", [claim(
        "teach.demo.readme-says", statement="A teaching repository's README says something, stated for a test.",
        label="source-backed", checks=[], review="a test claim",
        anchors=[dict(NOTE_ANCHOR), {"source": "mog9-flashattention-cupy", "sha": sha, "path": "README.md"}])])
    site = _export(project)
    assert (site / "teaching" / "index.html").is_file()
    top = _nav(site / "index.html")
    assert '<a href="teaching/index.html">Teaching code</a>' in top
    inner = _nav(site / "teaching" / "index.html")
    assert '<a href="../teaching/index.html" aria-current="page">Teaching code</a>' in inner
    claim_page = _nav(site / "claims" / "teach.demo.readme-says.html")
    assert '<a href="../teaching/index.html">Teaching code</a>' in claim_page
