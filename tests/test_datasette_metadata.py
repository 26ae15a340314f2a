"""The Datasette files match the index, and Datasette 0.65 and 1.0 both serve them.

docs/datasette-metadata.yaml (titles, descriptions) and docs/datasette.yaml (facets, sortable columns,
canned queries: Datasette 1.0's `-c` configuration) are the source; docs/datasette-0.65.yaml is the two
merged for 0.65, which reads everything from --metadata (docs/datasette_merge.py). Every table, facet and
column named exists, and every canned query runs on a freshly built index of the real corpus and returns
rows where the corpus has them.

The last test serves the index with each Datasette version. kb's own environment need not have Datasette;
point these variables at the Python of an environment that has it (only datasette and PyYAML needed):

    python3 -m venv /tmp/ds065 && /tmp/ds065/bin/pip install datasette==0.65.1 pyyaml
    python3 -m venv /tmp/ds10 && /tmp/ds10/bin/pip install datasette==1.0a19 'httpx<1' pyyaml
    KB_DATASETTE_065_PYTHON=/tmp/ds065/bin/python KB_DATASETTE_10_PYTHON=/tmp/ds10/bin/python \
        python -m pytest tests/test_datasette_metadata.py

A version that is not importable (variable unset, and not the Datasette of the Python running pytest) is
skipped, with the reason. (`pip install --pre` may pick an httpx 1.0 pre-release, which Datasette 1.0a19
cannot use: hence the pin.)
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kb.config import load_config
from kb.index.store import open_index

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
from datasette_merge import merge, merged_text  # noqa: E402

METADATA = yaml.safe_load((DOCS / "datasette-metadata.yaml").read_text())
CONFIG = yaml.safe_load((DOCS / "datasette.yaml").read_text())
META = merge(METADATA, CONFIG)
CONFIG_KEYS = {"facets", "sortable_columns", "label_column", "sort", "sort_desc", "hidden", "size", "fts_table"}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("idx") / "kb.db"
    open_index(load_config(ROOT, str(path)))
    return path


@pytest.fixture(scope="module")
def db(db_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(db_path)


def test_metadata_and_config_are_split_as_datasette_1_expects() -> None:
    kb = METADATA["databases"]["kb"]
    assert "queries" not in kb, "canned queries belong in docs/datasette.yaml (1.0 drops them from --metadata)"
    for name, spec in kb["tables"].items():
        assert not CONFIG_KEYS & set(spec), f"{name}: {CONFIG_KEYS & set(spec)} belong in docs/datasette.yaml"
        assert spec.get("title") and spec.get("description"), f"{name} has no title or description"
    assert (DOCS / "datasette-0.65.yaml").read_text() == merged_text(), "run python docs/datasette_merge.py --write"


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


def _python_for(series: str) -> str:
    """A Python that imports Datasette `series` ("0.65" or "1.0"), else skip saying how to provide one."""
    var = {"0.65": "KB_DATASETTE_065_PYTHON", "1.0": "KB_DATASETTE_10_PYTHON"}[series]
    tried = []
    for python in filter(None, (os.environ.get(var), sys.executable)):
        res = subprocess.run([python, "-c", "import datasette; print(datasette.__version__)"],
                             capture_output=True, text=True, timeout=120)
        version = res.stdout.strip()
        if res.returncode == 0 and (version == series or version.startswith(series + ".")
                                    or (series == "1.0" and version.startswith("1.0a"))):
            return python
        tried.append(f"{python}: {version or 'no datasette'}")
    pytest.skip(f"Datasette {series} is not importable ({'; '.join(tried)}); set {var} (see this file's docstring)")


@pytest.mark.parametrize("series", ["0.65", "1.0"])
def test_datasette_serves_titles_facets_and_queries(series: str, db_path: Path) -> None:
    """Each version, given the files as it expects them, shows every title, facet and canned query; and
    1.0 given the one merged file as --metadata drops the queries (why the files are split)."""
    python = _python_for(series)
    probe = str(Path(__file__).with_name("datasette_probe.py"))
    files = ([str(DOCS / "datasette-0.65.yaml")] if series == "0.65"
             else [str(DOCS / "datasette-metadata.yaml"), str(DOCS / "datasette.yaml")])
    res = subprocess.run([python, probe, str(db_path), *files], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    assert seen["version"].startswith(series)
    for name in CONFIG["databases"]["kb"]["queries"]:
        status, rows = seen["queries"][name]
        assert status == 200 and rows > 0, f"Datasette {seen['version']}: canned query {name}: HTTP {status}, {rows} rows"
    for table, spec in CONFIG["databases"]["kb"]["tables"].items():
        assert seen["facets"][table] == sorted(spec.get("facets", [])), (seen["version"], table)
    assert all(seen["titles"].values()), seen["titles"]
    if series == "1.0":
        one_file = subprocess.run([python, probe, str(db_path), str(DOCS / "datasette-0.65.yaml")],
                                  capture_output=True, text=True, timeout=300)
        assert {s for s, _ in json.loads(one_file.stdout)["queries"].values()} == {404}
