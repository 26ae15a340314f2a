"""STATUS.md and `kb errata` on the real corpus: counts that partition, links to claims, needs-hardware by GPU,
and a verified correcting claim for every finding."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kb.cli import cli
from kb.config import ConfigError, load_config
from kb.export.status_md import render_status
from kb.index.store import open_index
from kb.records.vocab import STATUSES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db_path = tmp_path_factory.mktemp("status") / "kb.db"
    db = open_index(load_config(root=ROOT, db=str(db_path))).db
    return {"db": db, "db_path": db_path}


def _table(text: str, heading: str) -> tuple[list[str], list[list[str]]]:
    block = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines() if line.startswith("|")]
    return rows[0], [r for r in rows[2:]]


def test_area_and_label_columns_partition_the_claims(corpus: dict[str, Any]) -> None:
    text = render_status(corpus["db"])
    total = corpus["db"].execute("SELECT COUNT(*) FROM claims").fetchone()[0]
    for heading, key in (("By area", 2), ("By label", 1)):
        head, rows = _table(text, heading)
        assert head[key] == "claims" and head[key + 1: key + 1 + len(STATUSES)] == list(STATUSES), head
        assert "verified" in head
        for r in rows:
            counts = [int(x) for x in r[key + 1: key + 1 + len(STATUSES)]]
            assert sum(counts) == int(r[key]), f"{heading} row {r[: key + 1]}: {counts} do not sum to {r[key]}"
        assert sum(int(r[key]) for r in rows) == total
    # The row counts agree with the index, counted here (FA1 backward once read 199 against 177 claims).
    head, rows = _table(text, "By area")
    per = Counter((g, p) for g, p in corpus["db"].execute("SELECT generation, phase FROM claims").fetchall())
    assert {(r[0], r[1]): int(r[2]) for r in rows} == dict(per)


def test_claim_ids_link_to_the_site_or_to_their_line(corpus: dict[str, Any]) -> None:
    plain = render_status(corpus["db"])
    refuted = [r[0] for r in corpus["db"].execute("SELECT claim_id FROM status WHERE hardware_class = '*' AND status = 'refuted'")]
    assert refuted
    where = dict(corpus["db"].execute("SELECT id, file || '#L' || line FROM claims").fetchall())
    for cid in refuted:
        assert f"[`{cid}`]({where[cid]})" in plain
    site = render_status(corpus["db"], "https://kb.example.org/fa/")
    assert "(https://kb.example.org/fa/errata.html)" in site.split("## By area")[0]
    for cid in refuted:
        assert f"[`{cid}`](https://kb.example.org/fa/claims/{cid}.html)" in site


def test_needs_hardware_is_one_line_per_gpu(corpus: dict[str, Any]) -> None:
    text = render_status(corpus["db"])
    block = text.split("## Deferred qualification (needs hardware)\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("- ")]
    pending = corpus["db"].execute("SELECT COUNT(*) FROM status WHERE hardware_class = '*' "
                                     "AND status = 'needs-hardware'").fetchone()[0]
    counts = [int(m[1]) for line in lines if (m := re.match(r"- \*\*.+?\*\* \((\d+)\): ", line))]
    assert len(counts) == len(lines) and sum(counts) == pending
    assert len(lines) < pending / 3  # grouped, not a bullet per claim
    assert not re.search(r"`[a-z0-9]+\.[a-z0-9.-]+`", block)  # no claim ids in the lines
    assert any(line.startswith("- **sm_80** (") for line in lines)


def test_every_finding_has_a_verified_correcting_claim_linked_from_it(corpus: dict[str, Any]) -> None:
    res = CliRunner().invoke(cli, ["--root", str(ROOT), "--db", str(corpus["db_path"]), "errata", "--json"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    findings = [f for group in data["notes"] + data["decks"] for sec in group.get("sections", group.get("slides", []))
                for f in sec["findings"]]
    # Every refuted claim whose cause is the notes or a deck, counted from the status table here.
    db = corpus["db"]
    expected = {r[0] for r in db.execute("SELECT claim_id FROM status WHERE hardware_class = '*' AND status = 'refuted' "
                                         "AND cause IN ('note', 'deck')")}
    assert expected and {f["claim"] for f in findings} == expected and data["count"] == len(expected)
    claims = {r[0]: json.loads(r[1]) for r in db.execute("SELECT id, json FROM claims")}
    status = dict(db.execute("SELECT claim_id, status FROM status WHERE hardware_class = '*'").fetchall())
    for f in findings:
        assert f["true_instead"], f"{f['claim']} has no correcting claim"
        for t in f["true_instead"]:
            fix = t["claim"]
            assert status[fix] == "verified" == t["status"], f"{fix} (correcting {f['claim']}) is {status[fix]}"
            linked = f["claim"] in (claims[fix].get("supersedes") or []) or fix in (claims[f["claim"]].get("disagrees_with") or [])
            assert linked, f"{fix} is neither superseding {f['claim']} nor named by it"


def test_site_url_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.kb]\nsite_url = "https://kb.example.org/fa"\n')
    monkeypatch.delenv("KB_SITE_URL", raising=False)
    cfg = load_config(root=tmp_path, db=str(tmp_path / "kb.db"))
    assert cfg.site_url == "https://kb.example.org/fa/"
    monkeypatch.setenv("KB_SITE_URL", "https://other.example.org/")
    assert cfg.site_url == "https://other.example.org/"
    monkeypatch.setenv("KB_SITE_URL", "javascript:alert(1)")
    with pytest.raises(ConfigError, match="KB_SITE_URL: must be an https:// URL"):
        _ = cfg.site_url
    monkeypatch.delenv("KB_SITE_URL")
    (tmp_path / "pyproject.toml").write_text('[tool.kb]\n\nsite_url = "http://plain.example.org/"\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml:3: \[tool.kb\] site_url: must be an https:// URL"):
        _ = cfg.site_url
