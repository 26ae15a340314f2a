"""The SQLite index: migrations upgrade old databases, refresh is incremental, the cache is disposable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import sqlite_utils

from kb.config import load_config
from kb.index.store import migrations, open_db, open_index


def test_old_database_upgrades_itself(project: Path) -> None:
    db_path = project / ".kb" / "kb.db"
    db_path.parent.mkdir(parents=True)
    old = sqlite_utils.Database(db_path)
    migrations.apply(old, stop_before="m002_status_and_search")
    assert "status" not in old.table_names()
    old.close()
    db = open_db(db_path)
    assert {"status", "claims_fts"} <= set(db.table_names())
    assert "arch" in db["claims"].columns_dict
    applied = [r["name"] for r in db.query("SELECT name FROM _sqlite_migrations ORDER BY applied_at")]
    assert applied == ["m001_initial", "m002_status_and_search", "m003_scope_columns", "m004_status_strength",
                       "m005_status_upstream", "m006_relations_and_rests", "m007_run_recorded", "m008_foreign_keys",
                       "m009_slide_anchors", "m010_status_cause", "m011_status_grade_note"]
    assert "slide" in db["anchors"].columns_dict
    assert "strength" in db["status"].columns_dict and "cause" in db["status"].columns_dict
    assert migrations.pending(db) == []


def test_refresh_only_when_inputs_change(project: Path) -> None:
    cfg = load_config(project, str(project / ".kb" / "kb.db"))
    assert open_index(cfg).rebuilt is True
    assert open_index(cfg).rebuilt is False  # nothing changed: no rebuild
    path = project / "claims" / "good.yaml"
    time.sleep(0.01)
    path.write_text(path.read_text().replace("stated for a test", "stated for a test again"))
    assert open_index(cfg).rebuilt is True
    assert open_index(cfg).rebuilt is False


def test_database_is_a_cache(project: Path, run_kb) -> None:
    first = json.loads(run_kb("claims", "--json").output)
    (project / ".kb" / "kb.db").unlink()
    assert json.loads(run_kb("claims", "--json").output) == first


def test_fts_search_finds_and_escapes(project: Path, run_kb) -> None:
    rows = json.loads(run_kb("search", "five", "--json").output)
    assert [r["id"] for r in rows] == ["test.arith.wrong"]
    # FTS syntax passes through (#27, as sqlite-utils search): broken syntax is bad input naming --quote,
    # and --quote takes the text literally.
    res = run_kb("search", 'NEAR("x" -', "--json")
    assert res.exit_code == 2 and "--quote" in res.output
    assert run_kb("search", 'NEAR("x" -', "--quote", "--json").exit_code == 0


def test_rows_declare_their_claim_for_datasette(project: Path, run_kb) -> None:
    """status, runs, checks and anchors name their claim as a foreign key (declared, not enforced)."""
    run_kb("verify")
    db = sqlite_utils.Database(project / ".kb" / "kb.db")
    for table in ("status", "runs", "checks", "anchors", "claim_topics", "claim_edges"):
        fks = {(fk.column, fk.other_table, fk.other_column) for fk in db[table].foreign_keys}
        assert ("claim_id", "claims", "id") in fks, table
    assert ("source", "sources", "id") in {(f.column, f.other_table, f.other_column) for f in db["anchors"].foreign_keys}
    # Evidence of a claim removed later stays readable: the keys are not enforced.
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] > 0
