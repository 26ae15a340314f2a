"""The SQLite index: a cache rebuilt from the text files, never the source of truth.

`open_index` applies pending migrations, then refreshes the index only when a
claim, source, evidence or verifier file changed (a stat of each, no reads).
A refresh validates everything first and writes in one transaction, so a bad
file leaves the database exactly as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils
from sqlite_utils.migrations import Migrations

from kb.config import Config
from kb.records.yamlfile import Problem

if TYPE_CHECKING:  # models (pydantic) load lazily: queries on a fresh index never need them
    from kb.records.loader import Corpus
    from kb.records.models import Run, Status

migrations = Migrations("kb")


@migrations()
def m001_initial(db: sqlite_utils.Database) -> None:
    """Claims, sources, anchors, checks and runs."""
    db["meta"].create({"key": str, "value": str}, pk="key")
    db["sources"].create({"id": str, "kind": str, "title": str, "json": str}, pk="id")
    db["claims"].create(
        {"id": str, "file": str, "line": int, "statement": str, "generation": str, "phase": str,
         "label": str, "topics": str, "review": str, "content_hash": str, "json": str},
        pk="id",
    )
    db["claim_topics"].create({"claim_id": str, "topic": str}, pk=("claim_id", "topic"))
    db["anchors"].create(
        {"claim_id": str, "idx": int, "source": str, "sha": str, "path": str, "line_start": int,
         "line_end": int, "heading": str, "locator": str, "sha256": str},
        pk=("claim_id", "idx"),
    )
    db["checks"].create(
        {"claim_id": str, "idx": int, "verifier": str, "params_json": str, "expect_json": str},
        pk=("claim_id", "idx"),
    )
    db["runs"].create(
        {"run_id": str, "claim_id": str, "check_index": int, "verifier": str, "verifier_hash": str,
         "claim_hash": str, "verdict": str, "reason": str, "hardware_class": str, "started": str,
         "duration_s": float, "json": str},
        pk="run_id",
    )
    db["runs"].create_index(["claim_id"])


@migrations()
def m002_status_and_search(db: sqlite_utils.Database) -> None:
    """Derived statuses, and full-text search over statements with sync triggers."""
    db["status"].create(
        {"claim_id": str, "hardware_class": str, "status": str, "reason": str, "run_ids": str},
        pk=("claim_id", "hardware_class"),
    )
    db["claims"].enable_fts(["id", "statement", "review"], create_triggers=True, tokenize="porter")


@migrations()
def m003_scope_columns(db: sqlite_utils.Database) -> None:
    """Scope as plain columns so `kb claims --arch sm_90` can filter in SQL."""
    db["claims"].add_column("arch", str)
    db["claims"].add_column("implementation", str)


@migrations()
def m004_status_strength(db: sqlite_utils.Database) -> None:
    """Evidence strength of each verdict (kb.index.strength)."""
    db["status"].add_column("strength", str)


@migrations()
def m005_status_upstream(db: sqlite_utils.Database) -> None:
    """Upstream change since a fixed pin: information beside the status."""
    db["status"].add_column("upstream", str)


@migrations()
def m006_relations_and_rests(db: sqlite_utils.Database) -> None:
    """Claim relations as rows, and what each claim rests on (kb.index.rests)."""
    db["claim_edges"].create({"claim_id": str, "target": str, "relation": str}, pk=("claim_id", "target", "relation"))
    db["claim_edges"].create_index(["target"])
    db["status"].add_column("rests_on", str)
    db["status"].add_column("rests_via", str)
    db["status"].add_column("rests_path", str)


@migrations()
def m007_run_recorded(db: sqlite_utils.Database) -> None:
    """When this machine recorded each run (the evidence file's stamp): the order of "latest"."""
    db["runs"].add_column("recorded", str)


@migrations()
def m008_foreign_keys(db: sqlite_utils.Database) -> None:
    """Declare what each row belongs to, so Datasette links status, runs, checks and anchors to their claim.

    Declared, not enforced (SQLite's foreign_keys pragma stays off): evidence of a
    claim that was since removed is history, kept and still readable.
    """
    db.add_foreign_keys([(t, "claim_id", "claims", "id")
                         for t in ("status", "runs", "checks", "anchors", "claim_topics", "claim_edges")]
                        + [("anchors", "source", "sources", "id"), ("claim_edges", "target", "claims", "id")])


@migrations()
def m009_slide_anchors(db: sqlite_utils.Database) -> None:
    """Slide anchors: the 1-based position of a slide in a deck (docs/slides/*.html)."""
    db["anchors"].add_column("slide", int)


@migrations()
def m010_status_cause(db: sqlite_utils.Database) -> None:
    """Why a verdict is refuted or inconclusive (kb.index.cause): the cause, its reason, and rule or judgement."""
    db["status"].add_column("cause", str)
    db["status"].add_column("cause_why", str)
    db["status"].add_column("cause_by", str)


@migrations()
def m011_status_grade_note(db: sqlite_utils.Database) -> None:
    """Which instance a derived verdict rests on (kb.index.instance): kb-instance or dispatch-seen, and why."""
    db["status"].add_column("grade_note", str)
    db["status"].add_column("grade_note_why", str)


class IndexSchemaError(sqlite3.DatabaseError):
    """The index database was written by a newer kb: its schema is one this kb does not know.

    A DatabaseError, so every caller that refuses an unusable database refuses this one too (the CLI
    exits 2 saying which file); it is never migrated or rebuilt in place by an older kb.
    """


def schema_version() -> int:
    """The index schema this kb writes: the number of migrations it knows (stored as PRAGMA user_version)."""
    return len(_known_migrations())


def _known_migrations() -> list[str]:
    return [m.name for m in getattr(migrations, "_migrations", [])]


def _refuse_newer(db: sqlite_utils.Database, path: Path) -> None:
    """Raise IndexSchemaError when the database's schema is newer than this kb's."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    known = _known_migrations()
    unknown = [m.name for m in migrations.applied(db) if m.name not in known]
    if version > len(known) or unknown:
        what = f"version {max(version, len(known) + len(unknown))}"
        if unknown:
            what += f", with migrations this kb does not have: {', '.join(unknown[:5])}"
        raise IndexSchemaError(
            f"{path} has index schema {what}; this kb knows schema version {len(known)}. It was written by a "
            "newer kb: upgrade this kb (pip install -U -e .), or give this kb its own index with --db/KB_DB, "
            "or delete the file (it is a cache, rebuilt from the files)")


class IndexError_(Exception):
    """The files could not be indexed; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s) in the input files")
        self.problems = problems


@dataclass
class Index:
    """An open, up-to-date index: what every command after opening works on.

    `kb verify` is handed one of these and records its runs through
    `record_runs`; nothing re-opens or rebuilds the index in the middle of a run.
    """

    db: sqlite_utils.Database
    rebuilt: bool
    cfg: Config | None = None
    fingerprint: str | None = None

    def corpus(self) -> Corpus:
        """Claims and sources as validated records (from the index's JSON columns)."""
        return corpus_from_index(self.db)

    def runs(self) -> list[Run]:
        """Every run the index holds that counts as evidence (a run whose stored verdict disagrees
        with its measurements is left out: it is neither reused as cached nor read as an input)."""
        from kb.records.models import Run

        skip = distrusted_runs(self.db)
        out = []
        for r in self.db.query("SELECT run_id, json, recorded FROM runs"):
            if r["run_id"] in skip:
                continue
            run = Run.model_validate_json(r["json"])
            run._recorded = r["recorded"]
            out.append(run)
        return out

    def warnings(self) -> list[str]:
        """What the CLI should print once per command (stderr), without refusing anything.

        Evidence files set aside (dated in the future, times that disagree with their name, null or
        non-finite measurements under a verdict that cannot rest on them), and runs whose stored
        verdict disagrees with their measurements where they would otherwise decide a status.
        """
        out = json.loads(_meta(self.db, "evidence_warnings") or "[]")
        for run_id, d in sorted(distrusted_runs(self.db).items(), key=lambda kv: (kv[1].get("claim", ""), kv[0])):
            if d.get("current"):
                where = f"{d['where']}: " if d.get("where") else ""
                out.append(f"{where}run {run_id} of claim {d.get('claim')} check {d.get('check')} "
                           f"[{d.get('class')}]: {d.get('why')}; it does not count")
        return out

    def status_counts(self) -> dict[str, int]:
        """Claims per overall status."""
        rows = self.db.query("SELECT status, count(*) AS n FROM status WHERE hardware_class='*' GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def record_runs(self, runs: list[Run], files: list[Path], registry: dict) -> None:
        """Add new runs (already written as evidence files) and re-derive the statuses they touch.

        One transaction. The result equals a full rebuild from the files (tests
        compare the two); status derivation is per claim, so only the claims
        with new runs are re-derived. When the fingerprint taken at open still
        holds for every input other than the new evidence files, the stored
        fingerprint is advanced; otherwise it is left alone, so the next
        command rebuilds from the files.
        """
        if not runs or self.cfg is None:
            return
        from kb.audit.state import load_drift
        from kb.index.status import derive, distrusted
        from kb.records.models import Run

        cfg = self.cfg
        affected = sorted({r.claim_id for r in runs})
        marks = ",".join("?" * len(affected))
        known = []
        for r in self.db.query(f"SELECT json, recorded FROM runs WHERE claim_id IN ({marks})", affected):
            run = Run.model_validate_json(r["json"])
            run._recorded = r["recorded"]
            known.append(run)
        corpus = self.corpus()
        claims = {cid: corpus.claims[cid] for cid in affected if cid in corpus.claims}
        every = known + runs
        flags = distrusted(claims, every, registry)
        statuses = derive(claims, every, registry, load_drift(cfg.root), corpus.sources, distrust=flags)
        touched = set(affected)
        entries = {k: v for k, v in distrusted_runs(self.db).items() if v.get("claim") not in touched}
        entries.update(_distrust_entries(every, flags, lambda rid: _file_of(rid, files)))
        before = input_fingerprint(cfg.root, exclude={Path(f).resolve() for f in files})
        with writer_lock(cfg.db_path), self.db.atomic():
            self.db["runs"].insert_all([_run_row(r) for r in runs], ignore=True)
            self.db["meta"].upsert({"key": "distrusted", "value": json.dumps(entries, sort_keys=True)}, pk="key")
            self.db.execute(f"DELETE FROM status WHERE claim_id IN ({marks})", affected)
            self.db["status"].insert_all(_status_rows(statuses))
            update_rests(self.db)  # a new verdict changes what the claims above it rest on
            update_instances(self.db, registry, cfg.verifiers_dir)  # a new trace can show another claim's instance
            if self.fingerprint is not None and before == self.fingerprint:
                fp = input_fingerprint(cfg.root)
                self.db["meta"].upsert({"key": "fingerprint", "value": fp}, pk="key")
                self.fingerprint = fp


WATCHED = ("claims", "sources", "evidence", "verifiers")


def input_fingerprint(root: Path, exclude: set[Path] | frozenset[Path] = frozenset()) -> str:
    """Hash of (path, size, mtime) of every input file: cheap, no reads. `exclude`: absolute paths left out."""
    h = hashlib.sha256()
    for folder in WATCHED:
        base = root / folder
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".py") and p.resolve() not in exclude:
                st = p.stat()
                h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    # The derivation code is an input too: a changed status rule must re-derive statuses.
    package = Path(__file__).resolve().parents[1]
    # kb/_corpus (a wheel's copy of the corpus, for `kb init`) is data, not derivation code.
    for p in sorted(q for q in package.rglob("*.py") if "_corpus" not in q.relative_to(package).parts):
        st = p.stat()
        h.update(f"kb/{p.relative_to(package).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


BUSY_TIMEOUT_MS = 120_000


@contextlib.contextmanager
def writer_lock(db_path: Path) -> Iterator[None]:
    """One writer at a time per database, across processes: concurrent commands wait, never fail.

    SQLite's own busy timeout covers single statements; this lock covers a whole
    migrate-check-rebuild (or record) sequence, so two commands never rebuild at once
    and the second finds the index already current.
    """
    lock = db_path.with_name(db_path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def open_db(path: Path) -> sqlite_utils.Database:
    """Open (creating if needed) the database and apply pending migrations."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(path)
    db.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    with writer_lock(path):
        _refuse_newer(db, path)  # never migrate, rebuild or read a newer kb's index
        db.conn.execute("PRAGMA journal_mode = WAL")  # readers never wait for a writer
        migrations.apply(db)
        if db.execute("PRAGMA user_version").fetchone()[0] != schema_version():
            db.conn.execute(f"PRAGMA user_version = {schema_version()}")
    return db


def _meta(db: sqlite_utils.Database, key: str) -> str | None:
    try:
        return db["meta"].get(key)["value"]
    except Exception:
        return None


def open_index(cfg: Config, force: bool = False) -> Index:
    """The up-to-date index; raises IndexError_ (database untouched) on bad input."""
    from kb.verify.evidence import JOURNAL_GLOB, recover_journals

    db = open_db(cfg.db_path)
    if any((cfg.root / "evidence").glob(JOURNAL_GLOB)):
        with writer_lock(cfg.db_path):
            recover_journals(cfg.root)  # runs a killed `kb verify` had finished become evidence files
    fp = input_fingerprint(cfg.root)
    if not force and _meta(db, "fingerprint") == fp:
        return Index(db, rebuilt=False, cfg=cfg, fingerprint=fp)
    with writer_lock(cfg.db_path):
        if not force and _meta(db, "fingerprint") == fp:  # another process rebuilt it while we waited
            return Index(db, rebuilt=False, cfg=cfg, fingerprint=fp)
        with _no_cyclic_gc():
            rebuild(db, cfg, fp)
    return Index(db, rebuilt=True, cfg=cfg, fingerprint=fp)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a rebuild allocates hundreds of thousands of objects.

    A rebuild creates no reference cycles worth collecting mid-way, yet the collector would walk the
    whole growing heap again and again (about a fifth of a 10,000-claim build); reference counting
    still frees everything as usual, and the collector resumes (and runs once) afterwards.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check_files(cfg: Config) -> tuple[Corpus, list[Run], dict[str, Any], list[Problem]]:
    """Validate claims, sources and evidence files against the project's verifiers.

    Returns the corpus, the runs, the registry and every problem (file:line),
    sorted; writes nothing. `kb validate` and every rebuild go through here.
    Evidence that is set aside (kb.verify.evidence) and runs whose stored verdict
    disagrees with their measurements where they would decide a status are
    non-blocking problems: `kb validate` fails on them, the index leaves them out.
    """
    with _no_cyclic_gc():
        corpus, runs, registry, problems, _ = _check_files(cfg)
        return corpus, runs, registry, problems


@dataclass
class _Trust:
    """What the evidence check found beside the runs: set-aside warnings and distrusted runs."""

    warnings: list[Problem]
    distrust: dict[str, str]
    entries: dict[str, dict[str, Any]]


def _distrust_entries(runs: list[Run], flags: dict[str, str], where: Any) -> dict[str, dict[str, Any]]:
    """Index entries for distrusted runs: why, whose, and whether it would otherwise decide a status."""
    from kb.index.status import overridden

    current = {r.run_id for r in overridden(runs, flags)}
    out = {}
    for r in runs:
        if r.run_id in flags and r.run_id not in out:
            out[r.run_id] = {"why": flags[r.run_id], "claim": r.claim_id, "check": r.check_index,
                             "class": r.hardware_class, "current": r.run_id in current, "where": where(r.run_id)}
    return out


def _file_of(run_id: str, files: list[Path]) -> str | None:
    """Which of the given evidence files holds a run (only asked for the rare distrusted run)."""
    for f in files:
        try:
            if any(isinstance(x, dict) and x.get("run_id") == run_id for x in json.loads(Path(f).read_text())["runs"]):
                return str(f)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def distrusted_runs(db: sqlite_utils.Database) -> dict[str, dict[str, Any]]:
    """run id -> why its stored verdict is not trusted (and whose it is), as the index recorded it."""
    try:
        return json.loads(_meta(db, "distrusted") or "{}")
    except ValueError:
        return {}


def _check_files(cfg: Config) -> tuple[Corpus, list[Run], dict[str, Any], list[Problem], _Trust]:
    from kb.index.status import distrusted
    from kb.records.integrity import validate
    from kb.verify.evidence import line_of_run, load_evidence
    from kb.verify.registry import load_verifiers

    try:
        registry = load_verifiers(cfg.verifiers_dir)
    except SyntaxError as exc:
        where = Path(exc.filename or "verifiers").resolve()
        rel = where.relative_to(cfg.root) if where.is_relative_to(cfg.root) else where
        return _empty_corpus(), [], {}, [Problem(str(rel), exc.lineno or 0, f"verifier module does not parse: {exc.msg}")], \
            _Trust([], {}, {})
    except Exception as exc:  # a verifier module that fails to import is the project's bad input, not kb's bug
        return _empty_corpus(), [], {}, [Problem(str(cfg.verifiers_dir or "verifiers"), 0,
                                                 f"verifier package failed to import: {type(exc).__name__}: {exc}")], \
            _Trust([], {}, {})
    corpus = validate(cfg.root, registry)
    located: dict[str, tuple[str, int]] = {}
    runs, ev_problems = load_evidence(cfg.root, located)
    flags = distrusted(corpus.claims, runs, registry)

    def where(run_id: str) -> str | None:
        if run_id not in located:
            return None
        display, i = located[run_id]
        return f"{display}:{line_of_run(cfg.root / display, i)}"

    entries = _distrust_entries(runs, flags, where)
    for run_id, d in sorted(entries.items(), key=lambda kv: (kv[1]["where"] or "", kv[0])):
        if d["current"]:
            path, _, line = (d["where"] or "evidence:0").rpartition(":")
            ev_problems.append(Problem(path, int(line), f"run {run_id} check {d['check']} [{d['class']}]: {d['why']}; "
                                       "it does not count", claim_id=d["claim"], blocking=False))
    warnings = [p for p in ev_problems if not p.blocking]
    return corpus, runs, registry, corpus.problems + ev_problems, _Trust(warnings, flags, entries)


def _empty_corpus() -> Corpus:
    from kb.records.loader import Corpus

    return Corpus()


def rebuild(db: sqlite_utils.Database, cfg: Config, fingerprint: str) -> None:
    """Validate every file, then replace the index contents in one transaction."""
    from kb.audit.state import AuditStateError, drift_path, load_drift
    from kb.index.status import derive

    with _no_cyclic_gc():
        corpus, runs, registry, problems, trust = _check_files(cfg)
    problems = [p for p in problems if p.blocking]  # binding rules fail `kb validate`, not the index
    try:
        drift = load_drift(cfg.root)
    except AuditStateError as exc:
        drift = {}
        problems.append(Problem(str(drift_path(cfg.root).relative_to(cfg.root)), exc.line, str(exc)))
    if problems:
        raise IndexError_(problems)
    statuses = derive(corpus.claims, runs, registry, drift, corpus.sources, distrust=trust.distrust)
    # Set-aside files are said once per command (Index.warnings); distrusted runs are kept with why.
    set_aside = [str(p) for p in trust.warnings if p.claim_id is None]

    claim_rows, topic_rows, anchor_rows, check_rows, edge_rows = [], [], [], [], []
    for cid, c in corpus.claims.items():
        at = corpus.claim_at[cid]
        claim_rows.append({
            "id": cid, "file": at.path, "line": at.line, "statement": c.statement,
            "generation": c.generation, "phase": c.phase, "label": c.label,
            "topics": json.dumps(c.topics), "review": c.review, "content_hash": c.content_hash(),
            "json": c.model_dump_json(by_alias=True, exclude_none=True),
            "arch": c.scope.arch, "implementation": c.scope.implementation,
        })
        topic_rows += [{"claim_id": cid, "topic": t} for t in c.topics]
        edge_rows += [{"claim_id": cid, "target": t, "relation": rel}
                      for rel in ("depends_on", "refines", "supersedes", "disagrees_with")
                      for t in dict.fromkeys(getattr(c, rel))]
        for i, a in enumerate(c.anchors):
            anchor_rows.append({
                "claim_id": cid, "idx": i, "source": a.source, "sha": a.sha, "path": a.path,
                "line_start": a.lines[0] if a.lines else None, "line_end": a.lines[1] if a.lines else None,
                "heading": a.heading, "slide": a.slide, "locator": a.paper_locator(), "sha256": a.sha256,
            })
        for i, ch in enumerate(c.checks):
            check_rows.append({
                "claim_id": cid, "idx": i, "verifier": ch.verifier, "params_json": json.dumps(ch.params),
                "expect_json": json.dumps({k: v.model_dump(by_alias=True, exclude_none=True) for k, v in ch.expect.items()}),
            })
    run_rows = [_run_row(r) for r in runs]
    status_rows = _status_rows(statuses)
    source_rows = [{"id": s.id, "kind": s.kind, "title": s.title, "json": s.model_dump_json(exclude_none=True)}
                   for s in corpus.sources.values()]

    with db.atomic():
        for table in ("claims", "claim_topics", "anchors", "checks", "runs", "status", "sources", "claim_edges"):
            db.execute(f"DELETE FROM [{table}]")
        db["sources"].insert_all(source_rows)
        db["claims"].insert_all(claim_rows)
        db["claim_topics"].insert_all(topic_rows)
        db["anchors"].insert_all(anchor_rows)
        db["checks"].insert_all(check_rows)
        db["runs"].insert_all(run_rows)
        db["status"].insert_all(status_rows)
        db["claim_edges"].insert_all(edge_rows)
        update_rests(db)
        update_instances(db, registry, cfg.verifiers_dir)
        db["meta"].upsert({"key": "evidence_warnings", "value": json.dumps(set_aside)}, pk="key")
        db["meta"].upsert({"key": "distrusted", "value": json.dumps(trust.entries, sort_keys=True)}, pk="key")
        db["meta"].upsert({"key": "fingerprint", "value": fingerprint}, pk="key")


def update_rests(db: sqlite_utils.Database) -> None:
    """Re-derive, for every claim, what its `depends_on` chain rests on (inside the caller's transaction)."""
    from kb.index.rests import rests_on

    deps: dict[str, list[str]] = {}
    for r in db.query("SELECT claim_id, target FROM claim_edges WHERE relation = 'depends_on' ORDER BY rowid"):
        deps.setdefault(r["claim_id"], []).append(r["target"])
    status = {r["claim_id"]: r["status"] for r in db.query("SELECT claim_id, status FROM status WHERE hardware_class = '*'")}
    rests = rests_on(deps, status)
    db.execute("UPDATE status SET rests_on = NULL, rests_via = NULL, rests_path = NULL WHERE hardware_class = '*'")
    db.conn.executemany("UPDATE status SET rests_on = ?, rests_via = ?, rests_path = ? WHERE claim_id = ? AND hardware_class = '*'",
                   [(r.state, r.via, json.dumps(r.path), cid) for cid, r in rests.items()])


def update_instances(db: sqlite_utils.Database, registry: Mapping[str, Any], verifiers: Path | None) -> None:
    """Re-derive every derived verdict's instance note (kb.index.instance) inside the caller's transaction."""
    from kb.index.instance import dispatched, grade_notes, run_dicts
    from kb.index.strength import grade

    def snippet(name: str) -> str | None:
        for path in ((verifiers / "snippets" / "constexpr").glob(f"{name}.*") if verifiers else ()):
            return path.read_text(encoding="utf-8")
        return None

    rows = list(db.query("SELECT claim_id, run_ids FROM status WHERE hardware_class = '*' AND strength = 'derived'"))
    ids = {rid: r["claim_id"] for r in rows for rid in json.loads(r["run_ids"] or "[]")}
    deciding: dict[str, list[dict[str, Any]]] = {r["claim_id"]: [] for r in rows}
    for rid_chunk in _chunks(sorted(ids), 500):
        marks = ",".join("?" * len(rid_chunk))
        for run in run_dicts(db.query(f"SELECT json FROM runs WHERE run_id IN ({marks})", rid_chunk)):
            g = grade(registry.get(run["verifier"]), run.get("expect") or {}, run["hardware_class"])[0]
            deciding[ids[run["run_id"]]].append({"verifier": run["verifier"], "params": run.get("params"), "grade": g})
    launches = dispatched(run_dicts(db.query("SELECT json FROM runs WHERE verifier = 'code.launch-trace'")))
    notes = grade_notes(deciding, launches, snippet)
    db.execute("UPDATE status SET grade_note = NULL, grade_note_why = NULL WHERE hardware_class = '*'")
    db.conn.executemany("UPDATE status SET grade_note = ?, grade_note_why = ? WHERE claim_id = ? AND hardware_class = '*'",
                        [(n, why, cid) for cid, (n, why) in notes.items()])


def _chunks(items: list[str], n: int) -> Iterable[list[str]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _run_row(r: Run) -> dict[str, Any]:
    return {
        "run_id": r.run_id, "claim_id": r.claim_id, "check_index": r.check_index, "verifier": r.verifier,
        "verifier_hash": r.verifier_hash, "claim_hash": r.claim_hash, "verdict": r.verdict, "reason": r.reason,
        "hardware_class": r.hardware_class, "started": r.started, "duration_s": r.duration_s,
        "json": r.model_dump_json(), "recorded": r._recorded,
    }


def _status_rows(statuses: list[Status]) -> list[dict[str, Any]]:
    return [{**s.model_dump(exclude={"run_ids"}), "run_ids": json.dumps(s.run_ids)} for s in statuses]


def corpus_from_index(db: sqlite_utils.Database) -> Corpus:
    """Claims and sources rebuilt from the index's JSON columns (already validated; no YAML parse).

    `kb verify` with nothing changed must finish in well under 2 s; re-reading
    1,500 claims from YAML alone costs more than that.
    """
    from kb.records.loader import Corpus, Located
    from kb.records.models import Claim, Source

    corpus = Corpus()
    for r in db.query("SELECT id, file, line, json FROM claims"):
        corpus.claims[r["id"]] = Claim.model_validate_json(r["json"])
        corpus.claim_at[r["id"]] = Located(r["file"], r["line"])
    for r in db.query("SELECT id, json FROM sources"):
        corpus.sources[r["id"]] = Source.model_validate_json(r["json"])
    return corpus
