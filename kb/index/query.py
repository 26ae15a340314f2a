"""Queries over the index: the library behind `kb claims`, `show`, `search`, `sources`."""

from __future__ import annotations

import json
import re
from typing import Any

import sqlite_utils

CLAIM_COLUMNS = ("c.id, c.statement, c.generation, c.phase, c.label, c.topics, c.file, c.line, s.status, s.reason, "
                 "s.strength, s.rests_on, s.rests_via, s.cause, s.cause_why, s.cause_by")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"], "statement": r["statement"], "generation": r["generation"], "phase": r["phase"],
        "label": r["label"], "topics": json.loads(r["topics"]), "status": r["status"],
        "status_reason": r["reason"], "strength": r["strength"], "rests_on": r["rests_on"],
        "rests_via": r["rests_via"], "file": r["file"], "line": r["line"],
        # Why a refuted or inconclusive verdict is what it is (kb.index.cause); null otherwise.
        "cause": r.get("cause"), "cause_why": r.get("cause_why"), "cause_by": r.get("cause_by"),
    }


Filter = str | list[str] | tuple[str, ...] | None


def _values(v: Filter) -> list[str]:
    """A filter's values: one string, or several (any of them matches)."""
    if not v:
        return []
    return [v] if isinstance(v, str) else [x for x in v if x]


def list_claims(db: sqlite_utils.Database, generation: Filter = None, topic: Filter = None,
                phase: Filter = None, label: Filter = None, status: Filter = None,
                source: Filter = None, arch: Filter = None,
                strength: Filter = None, rests_on: Filter = None) -> list[dict[str, Any]]:
    """Claims matching every given filter, ordered by id.

    A filter with several values matches any of them (repeated options combine);
    `arch` matches within the scope's arch text.
    """
    where: list[str] = []
    args: list[str] = []

    def any_of(template: str, vals: list[str]) -> None:
        if vals:
            where.append("(" + " OR ".join(template for _ in vals) + ")")
            args.extend(vals)

    any_of("c.arch LIKE ?", [f"%{a}%" for a in _values(arch)])
    for col, val in (("c.generation", generation), ("c.phase", phase), ("c.label", label), ("s.status", status),
                     ("s.strength", strength), ("s.rests_on", rests_on)):
        any_of(f"{col} = ?", _values(val))
    any_of("c.id IN (SELECT claim_id FROM claim_topics WHERE topic = ?)", _values(topic))
    any_of("c.id IN (SELECT claim_id FROM anchors WHERE source = ?)", _values(source))
    sql = (f"SELECT {CLAIM_COLUMNS} FROM claims c LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*'"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id")
    return [_row(r) for r in db.query(sql, args)]


def _match(text: str) -> str | None:
    """An FTS5 query for the words of `text`, each quoted so '-', ':' and '.' in user input are literal."""
    terms = [t for t in re.findall(r"[\w.-]+", text) if t]
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


def search(db: sqlite_utils.Database, text: str, limit: int = 50) -> list[dict[str, Any]]:
    """Full-text search over id, statement and review reason (FTS5, porter stemming)."""
    match = _match(text)
    if match is None:
        return []
    sql = (f"SELECT {CLAIM_COLUMNS} FROM claims_fts f JOIN claims c ON c.rowid = f.rowid "
           "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*' "
           "WHERE claims_fts MATCH ? ORDER BY bm25(claims_fts) LIMIT ?")
    return [_row(r) for r in db.query(sql, [match, limit])]


def search_count(db: sqlite_utils.Database, text: str) -> int:
    """How many claims `search` would find with no limit."""
    match = _match(text)
    if match is None:
        return 0
    return next(iter(db.query("SELECT count(*) AS n FROM claims_fts WHERE claims_fts MATCH ?", [match])))["n"]


def claim_ids(db: sqlite_utils.Database) -> list[str]:
    """Every claim id (for suggestions)."""
    return [r["id"] for r in db.query("SELECT id FROM claims ORDER BY id")]


def source_ids(db: sqlite_utils.Database) -> list[str]:
    """Every registered source id (for validating filters)."""
    return [r["id"] for r in db.query("SELECT id FROM sources ORDER BY id")]


def get_claim(db: sqlite_utils.Database, claim_id: str) -> dict[str, Any] | None:
    """One claim with its statuses per hardware class and its evidence history."""
    rows = list(db.query("SELECT * FROM claims WHERE id = ?", [claim_id]))
    if not rows:
        return None
    r = rows[0]
    out = json.loads(r["json"])
    out["file"], out["line"] = r["file"], r["line"]
    out["status"] = [
        {k: (json.loads(v) if k == "run_ids" else v) for k, v in s.items() if k != "claim_id"}
        for s in db.query("SELECT * FROM status WHERE claim_id = ? ORDER BY hardware_class", [claim_id])
    ]
    out["rests"] = _rests(db, claim_id)
    out["runs"] = [json.loads(x["json"]) for x in
                   db.query("SELECT json FROM runs WHERE claim_id = ? ORDER BY started DESC", [claim_id])]
    # A run whose stored verdict disagrees with its measurements is kept, marked, and never counted.
    flagged = _distrusted(db)
    for run in out["runs"]:
        if run.get("run_id") in flagged:
            run["distrust"] = flagged[run["run_id"]].get("why")
    return out


def _distrusted(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    try:
        row = db["meta"].get("distrusted")
        return json.loads(row["value"]) or {}
    except Exception:
        return {}


def list_sources(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Every registered source with how many anchors cite it."""
    sql = ("SELECT s.id, s.kind, s.title, s.json, (SELECT count(*) FROM anchors a WHERE a.source = s.id) AS anchors "
           "FROM sources s ORDER BY s.kind, s.id")
    out = []
    for r in db.query(sql):
        rec = json.loads(r["json"])
        rec["anchors"] = r["anchors"]
        out.append(rec)
    return out


def status_counts(db: sqlite_utils.Database) -> dict[str, int]:
    """Overall status -> number of claims."""
    return {r["status"]: r["n"] for r in
            db.query("SELECT status, count(*) AS n FROM status WHERE hardware_class = '*' GROUP BY status")}


def strength_counts(db: sqlite_utils.Database) -> dict[str, dict[str, int]]:
    """Generation -> evidence grade -> number of claims (overall verdicts; '-' where nothing decides)."""
    out: dict[str, dict[str, int]] = {}
    sql = ("SELECT c.generation AS g, coalesce(s.strength, '-') AS k, count(*) AS n FROM claims c "
           "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*' GROUP BY g, k")
    for r in db.query(sql):
        out.setdefault(r["g"], {})[r["k"]] = r["n"]
    return out


def _rests(db: sqlite_utils.Database, claim_id: str) -> dict[str, Any]:
    """What the claim rests on: its state, the chain to the nearest claim in that state, the direct edges."""
    row = next(iter(db.query("SELECT rests_on, rests_via, rests_path FROM status WHERE claim_id = ? AND hardware_class = '*'",
                             [claim_id])), None)
    status = {r["claim_id"]: r["status"] for r in db.query(
        "SELECT s.claim_id, s.status FROM status s JOIN claim_edges e ON e.target = s.claim_id OR e.claim_id = s.claim_id "
        "WHERE (e.claim_id = ? OR e.target = ?) AND s.hardware_class = '*'", [claim_id, claim_id])}
    out_sql = "SELECT relation, target FROM claim_edges WHERE claim_id = ? ORDER BY relation, target"
    in_sql = "SELECT relation, claim_id FROM claim_edges WHERE target = ? ORDER BY relation, claim_id"
    out_edges = [{"relation": r["relation"], "claim": r["target"], "status": status.get(r["target"])}
                 for r in db.query(out_sql, [claim_id])]
    in_edges = [{"relation": r["relation"], "claim": r["claim_id"], "status": status.get(r["claim_id"])}
                for r in db.query(in_sql, [claim_id])]
    path = json.loads(row["rests_path"]) if row and row["rests_path"] else []
    return {"state": row["rests_on"] if row else None, "via": row["rests_via"] if row else None,
            "chain": [{"claim": c, "status": _status_of(db, c)} for c in path], "uses": out_edges, "used_by": in_edges}


def _status_of(db: sqlite_utils.Database, claim_id: str) -> str | None:
    row = next(iter(db.query("SELECT status FROM status WHERE claim_id = ? AND hardware_class = '*'", [claim_id])), None)
    return row["status"] if row else None


def blast_radius(db: sqlite_utils.Database, states: tuple[str, ...] = ("refuted",)) -> dict[str, list[str]]:
    """Nearest claim in one of `states` -> the claims whose conclusions rest on it."""
    out: dict[str, list[str]] = {}
    marks = ",".join("?" * len(states))
    for r in db.query(f"SELECT claim_id, rests_via FROM status WHERE hardware_class = '*' AND rests_on IN ({marks}) "
                      "ORDER BY claim_id", list(states)):
        out.setdefault(r["rests_via"], []).append(r["claim_id"])
    return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def cause_problems(db: sqlite_utils.Database) -> list[str]:
    """`file:line: ...` for every refuted claim whose cause is unjudged or an extraction error of the KB.

    A refutation is published as a finding about someone's work: it needs a cause, and a claim that
    misstates its source is the KB's to restate, not a finding.
    """
    out = []
    for r in db.query("SELECT c.id, c.file, c.line, s.cause FROM claims c JOIN status s ON s.claim_id = c.id "
                      "WHERE s.hardware_class = '*' AND s.status = 'refuted' AND "
                      "(s.cause IS NULL OR s.cause IN ('unjudged', 'extraction')) ORDER BY c.file, c.line"):
        if r["cause"] == "extraction":
            why = "is refuted through extraction: the claim misstates its source; restate it as the source states it"
        else:
            why = "is refuted, and no rule decides its cause: record the judgement as cause: {kind, why}"
        out.append(f"{r['file']}:{r['line']}: claim {r['id']} field cause: {why}")
    return out


def batches(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The batches on record behind a claim's measurement checks: one row per run of a batch-decided check under
    the claim content and verifier code of its latest run (newest first), with the measured value and spread."""
    from kb.index.status import BATCH_VERIFIERS

    out: list[dict[str, Any]] = []
    latest: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rec.get("runs", []):  # newest first
        if r.get("verifier") in BATCH_VERIFIERS:
            latest.setdefault((r["check_index"], r["hardware_class"]), r)
    for r in rec.get("runs", []):
        top = latest.get((r["check_index"], r["hardware_class"]))
        if top is None or r.get("verifier") != top.get("verifier") or r["claim_hash"] != top["claim_hash"] \
                or r["verifier_hash"] != top["verifier_hash"] or r.get("expect") != top.get("expect"):
            continue
        name = next(iter(r.get("expect") or {}), "")
        m = r.get("measurements", {})
        value = (m.get(name) or {}).get("value")
        spread = (m.get(f"{name}_spread") or {}).get("value")
        out.append({"check": r["check_index"], "class": r["hardware_class"], "started": r["started"],
                    "verdict": r["verdict"], "measure": name, "value": value,
                    "spread": spread if isinstance(spread, list) else None, "run_id": r["run_id"]})
    return out
