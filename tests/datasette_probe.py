"""Run by tests/test_datasette_metadata.py with the Python of a Datasette install (0.65 or 1.0), not by pytest.

    python tests/datasette_probe.py DB METADATA [CONFIG]

Serves DB in-process with the metadata (and, for 1.0, the configuration) given and prints, as JSON, what a
user would see: the version, each canned query's HTTP status and row count, each table's configured facets
and whether its page shows the title the metadata gives. Needs only datasette and PyYAML.
"""

from __future__ import annotations

import asyncio
import json
import sys

import yaml
from datasette import __version__
from datasette.app import Datasette


async def probe(db: str, metadata: dict, config: dict | None, queries: dict, tables: dict) -> dict:
    kwargs = {"metadata": metadata} if config is None else {"metadata": metadata, "config": config}
    ds = Datasette([db], **kwargs)
    if hasattr(ds, "invoke_startup"):
        await ds.invoke_startup()
    out: dict = {"version": __version__, "queries": {}, "facets": {}, "titles": {}}
    for name in queries:
        r = await ds.client.get(f"/kb/{name}.json?_shape=array&deck=docs/slides/fa2-forward.html&slide=8")
        out["queries"][name] = [r.status_code, len(r.json()) if r.status_code == 200 else 0]
    for table, title in tables.items():
        r = await ds.client.get(f"/kb/{table}.json?_size=1&_extra=facet_results")
        results = r.json().get("facet_results") or {}
        results = results.get("results", results) if isinstance(results, dict) else {}
        out["facets"][table] = sorted(results)
        page = await ds.client.get(f"/kb/{table}")
        out["titles"][table] = bool(title) and f">{title}</h1>" in page.text
    return out


def main() -> None:
    db, meta_path, *rest = sys.argv[1:]
    metadata = yaml.safe_load(open(meta_path))
    config = yaml.safe_load(open(rest[0])) if rest else None
    # Ask for every query and table either file names, so a dropped one shows as a 404 / no facets.
    names: dict = {}
    tables: dict = {}
    for doc in (metadata, config or {}):
        kb = (doc.get("databases") or {}).get("kb") or {}
        names.update(kb.get("queries") or {})
        for t, spec in (kb.get("tables") or {}).items():
            tables[t] = tables.get(t) or spec.get("title")
    print(json.dumps(asyncio.run(probe(db, metadata, config, names, tables))))


if __name__ == "__main__":
    main()
