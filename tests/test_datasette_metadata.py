"""docs/datasette-metadata.yaml matches the index: every table, facet and column it names exists, and every
canned query runs on a freshly built index of the real corpus and returns rows where the corpus has them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from kb.config import load_config
from kb.index.store import open_index

ROOT = Path(__file__).resolve().parent.parent
META = yaml.safe_load((ROOT / "docs" / "datasette-metadata.yaml").read_text())


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = tmp_path_factory.mktemp("idx") / "kb.db"
    open_index(load_config(ROOT, str(path)))
    return sqlite3.connect(path)


def test_tables_facets_and_columns_exist(db: sqlite3.Connection) -> None:
    tables = META["databases"]["kb"]["tables"]
    for name, spec in tables.items():
        cols = {r[1] for r in db.execute(f"PRAGMA table_info({name})")}
        assert cols, f"no table {name}"
        for key in ("facets", "sortable_columns"):
            missing = set(spec.get(key, [])) - cols
            assert not missing, f"{name}.{key} names {missing}, not columns of {name}"
        assert spec.get("label_column", "id" if "id" in cols else next(iter(cols))) in cols


def test_every_canned_query_runs(db: sqlite3.Connection) -> None:
    queries = META["databases"]["kb"]["queries"]
    params = {"deck": "docs/slides/fa2-forward.html", "slide": 8}
    for name, q in queries.items():
        rows = db.execute(q["sql"], params).fetchall()
        # The corpus has refuted claims, waiting claims, disagreements, GPU runs and slide anchors.
        assert rows, f"canned query {name} returned nothing"
