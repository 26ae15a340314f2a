"""Queries over the index: the library behind `kb claims`, `show`, `search`, `sources`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import sqlite_utils

CLAIM_COLUMNS = ("c.id, c.statement, c.generation, c.phase, c.label, c.topics, c.file, c.line, s.status, s.reason, "
                 "s.strength, s.rests_on, s.rests_via, s.cause, s.cause_why, s.cause_by, "
                 "s.grade_note, s.grade_note_why")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"], "statement": r["statement"], "generation": r["generation"], "phase": r["phase"],
        "label": r["label"], "topics": json.loads(r["topics"]), "status": r["status"],
        "status_reason": r["reason"], "strength": r["strength"], "rests_on": r["rests_on"],
        "rests_via": r["rests_via"], "file": r["file"], "line": r["line"],
        # Why a refuted or inconclusive verdict is what it is (kb.index.cause); null otherwise.
        "cause": r.get("cause"), "cause_why": r.get("cause_why"), "cause_by": r.get("cause_by"),
        # Which instance a derived verdict rests on (kb.index.instance): kb-instance, dispatch-seen or null.
        "grade_note": r.get("grade_note"), "grade_note_why": r.get("grade_note_why"),
    }


Filter = str | list[str] | tuple[str, ...] | None


def _values(v: Filter) -> list[str]:
    """A filter's values: one string, or several (any of them matches)."""
    if not v:
        return []
    return [v] if isinstance(v, str) else [x for x in v if x]


class FilterError(ValueError):
    """A filter value that matches nothing it could mean (an unknown GPU, an FTS query that cannot parse)."""


# Filters answered in SQL: option name -> the condition for one value (values of one filter combine with OR).
_SQL_FILTERS = {
    "generation": "c.generation = ?", "phase": "c.phase = ?", "label": "c.label = ?", "status": "s.status = ?",
    "strength": "s.strength = ?", "rests_on": "s.rests_on = ?",
    "topic": "c.id IN (SELECT claim_id FROM claim_topics WHERE topic = ?)",
    "source": "c.id IN (SELECT claim_id FROM anchors WHERE source = ?)",
}
# Filters answered in Python over free text (scope arch, the needs-hardware requirement) through kb.index.arch.
_TEXT_FILTERS = ("arch", "waiting_for")
FILTERS = (*_SQL_FILTERS, *_TEXT_FILTERS)


def hardware_sheets(db: sqlite_utils.Database) -> list[Any]:
    """The hardware sheets registered in sources/ (kb.index.arch.Sheet), which GPU names resolve through."""
    from kb.index.arch import sheets_from_rows

    return sheets_from_rows(list(db.query("SELECT json FROM sources WHERE kind = 'hardware'")))


def resolve_archs(db: sqlite_utils.Database, values: Filter) -> list[Any]:
    """GPU names, SKUs and architectures as kb.index.arch.Arch (`any` left out); raises FilterError naming the closest."""
    from kb.index.arch import UnknownArch, resolve

    sheets = hardware_sheets(db)
    out = []
    for v in _values(values):
        if v.strip().lower() == "any":
            continue  # --waiting-for any: a requirement that names no architecture
        try:
            out.append(resolve(v, sheets))
        except UnknownArch as exc:
            raise FilterError(str(exc)) from None
    return out


def _text_match(db: sqlite_utils.Database, key: str, values: Filter) -> Callable[[dict[str, Any]], bool]:
    """A predicate over a result row (with its `_arch` and status) for --arch / --waiting-for values."""
    from kb.index.arch import named_in, names, requirement_text

    sheets = hardware_sheets(db)
    archs = resolve_archs(db, values)
    want_any = any(v.strip().lower() == "any" for v in _values(values))
    if key == "arch":
        # Scope text: an explicit suffix (sm_90a) must be named as such; sm_90 or a GPU name takes any suffix.
        return lambda r: any(names(named_in(r["_arch"], sheets), a) for a in archs)

    def waiting(r: dict[str, Any]) -> bool:
        # needs-hardware claims, and verified ones with a GPU check still pending ("also pending: ... needs ...")
        req = requirement_text(r["status_reason"]) if r["status"] in ("needs-hardware", "verified") else ""
        if not req:
            return False
        named = named_in(req, sheets)
        # Hardware, not code: an H100 runs sm_90 and sm_90a code alike.
        return (want_any and not named) or any(names(named, a, strict_suffix=False) for a in archs)

    return waiting


def _match(text: str) -> str | None:
    """An FTS5 query for the words of `text`, each quoted so '-', ':' and '.' in user input are literal."""
    terms = [t for t in re.findall(r"[\w.-]+", text) if t]
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms) if terms else None


def find_claims(db: sqlite_utils.Database, filters: dict[str, Filter] | None = None,
                exclude: dict[str, Filter] | None = None, text: str | None = None, quote: bool = False,
                limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Claims matching every filter and none of the excluded values, with how many matched before `limit`.

    `filters` and `exclude` map a filter name (FILTERS) to one value or several: several values of one
    filter match any of them; filters combine with AND; an excluded value removes every claim it matches.
    `arch` reads the scope's architecture text and `waiting_for` the needs-hardware requirement, both
    through kb.index.arch (`A100` is sm_80 by the hardware sheets). With `text`, a full-text search over id,
    statement and review reason, best match first: FTS5 syntax passes through (`a OR "b c"`, `NEAR`,
    `prefix*`), or with `quote` every word is literal. Without `text` the order is by id.
    Raises FilterError for a value no GPU resolves from, or for FTS5 syntax that does not parse.
    """
    import sqlite3

    filters, exclude = filters or {}, exclude or {}
    unknown = [k for k in (*filters, *exclude) if k not in FILTERS]
    if unknown:
        raise FilterError(f"unknown filter {unknown[0]!r} (filters: {', '.join(FILTERS)})")
    where: list[str] = []
    args: list[Any] = []
    for key, template in _SQL_FILTERS.items():
        if vals := _values(filters.get(key)):
            where.append("(" + " OR ".join(template for _ in vals) + ")")
            args.extend(vals)
        if vals := _values(exclude.get(key)):
            # coalesce: a claim with no status row (or no strength) is none of the excluded values
            where.append("NOT coalesce((" + " OR ".join(template for _ in vals) + "), 0)")
            args.extend(vals)
    keep = [_text_match(db, k, filters[k]) for k in _TEXT_FILTERS if _values(filters.get(k))]
    drop = [_text_match(db, k, exclude[k]) for k in _TEXT_FILTERS if _values(exclude.get(k))]
    cols = f"{CLAIM_COLUMNS}, c.arch AS _arch"
    if text is not None:
        match = _match(text) if quote else text.strip()
        if not match:
            return [], 0
        sql = (f"SELECT {cols} FROM claims_fts f JOIN claims c ON c.rowid = f.rowid "
               "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*' "
               "WHERE claims_fts MATCH ?" + "".join(f" AND {w}" for w in where) + " ORDER BY bm25(claims_fts), c.id")
        args = [match, *args]
    else:
        sql = (f"SELECT {cols} FROM claims c LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*'"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY c.id")
    try:
        raw = [dict(r) for r in db.query(sql, args)]
    except sqlite3.OperationalError as exc:
        if text is None:
            raise
        raise FilterError(f"{text!r} is not a full-text query SQLite can read ({exc}); "
                          "pass --quote to search for the words as written") from None
    rows = []
    for r in raw:
        row = _row(r)
        probe = {**row, "_arch": r["_arch"]}
        if all(k(probe) for k in keep) and not any(d(probe) for d in drop):
            rows.append(row)
    return (rows if limit is None else rows[:limit]), len(rows)


def list_claims(db: sqlite_utils.Database, generation: Filter = None, topic: Filter = None,
                phase: Filter = None, label: Filter = None, status: Filter = None,
                source: Filter = None, arch: Filter = None,
                strength: Filter = None, rests_on: Filter = None, waiting_for: Filter = None) -> list[dict[str, Any]]:
    """Claims matching every given filter, ordered by id (find_claims without exclusions, text or limit)."""
    given = {"generation": generation, "topic": topic, "phase": phase, "label": label, "status": status,
             "source": source, "arch": arch, "strength": strength, "rests_on": rests_on, "waiting_for": waiting_for}
    return find_claims(db, {k: v for k, v in given.items() if v})[0]


def search(db: sqlite_utils.Database, text: str, limit: int = 50, quote: bool = True) -> list[dict[str, Any]]:
    """Full-text search over id, statement and review reason (FTS5, porter stemming), best match first.

    Quoted (every word literal) by default here, for library callers passing user text; the CLI passes
    FTS5 syntax through unless --quote.
    """
    return find_claims(db, text=text, quote=quote, limit=limit)[0]


def search_count(db: sqlite_utils.Database, text: str, quote: bool = True) -> int:
    """How many claims `search` would find with no limit."""
    return find_claims(db, text=text, quote=quote)[1]


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
