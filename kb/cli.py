"""The `kb` command line: thin commands over the kb library.

Data goes to stdout, messages and progress to stderr. Exit codes: 0 fine;
1 something refuted or drifted (a finding); 2 bad input or usage; 3 a check
could not run (harness fault, partial audit) or an output could not be
written (disk full, permissions, read-only file system); 4 an internal error
in kb (a bug: the traceback goes to stderr); 130 interrupted. Text output
escapes control characters in record data (kb.render.safe).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from kb import __version__
from kb.config import Config, load_config
from kb.index.rests import RESTS
from kb.index.strength import GRADES
from kb.records.vocab import GENERATIONS, LABELS, PHASES, STATUS_MEANINGS, STATUSES, TOPICS, VERIFIER_KINDS
from kb.render import echo, emit_json, fitted_table, safe, table, term_width


class MachineError(click.ClickException):
    """This machine could not do it (a full disk, permissions, a read-only file system): exit 3."""

    exit_code = 3

    def format_message(self) -> str:
        """The message, control characters escaped."""
        return safe(self.message)

    def show(self, file: Any = None) -> None:
        """One line on stderr, as main() prints the machine's errors: `kb: cannot write PATH: why`."""
        click.echo(f"kb: {self.format_message()}", err=True)


class BadInput(click.ClickException):
    """Input files are wrong: exit 2 after listing every problem."""

    exit_code = 2

    def format_message(self) -> str:
        """The message, control characters in any record text it quotes escaped."""
        return safe(self.message)


def _cfg(ctx: click.Context) -> Config:
    """The project's configuration; exit 2 with what to do when there is no corpus (kb.config.NoCorpus)."""
    obj = ctx.find_root().obj
    if obj.get("cfg") is None:
        raise BadInput(obj["no_corpus"])
    return obj["cfg"]


def _index(ctx: click.Context, force: bool = False):
    import sqlite3

    from kb.index.store import IndexError_, open_index

    cfg = _cfg(ctx)
    try:
        idx = open_index(cfg, force=force)
    except IndexError_ as exc:
        for p in exc.problems:
            echo(str(p), err=True)
        raise BadInput(f"{len(exc.problems)} problem(s) in the input files; the index was left unchanged") from None
    except (sqlite3.DatabaseError, OSError) as exc:
        raise BadInput(f"cannot use {cfg.db_path} as the index database ({exc}); "
                       "point --db at a new file or delete it: it is a cache, rebuilt from the files") from None
    # Evidence set aside and runs whose stored verdict disagrees with their measurements: said once per command.
    root = ctx.find_root()
    root.meta.setdefault("kb_warned", False)
    if not root.meta["kb_warned"]:
        root.meta["kb_warned"] = True
        for w in idx.warnings():
            echo(f"kb: warning: {w}", err=True)
    return idx


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar="KB_DB", help="SQLite index path (default .kb/kb.db in the project).")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), envvar="KB_ROOT",
              help="Project root holding claims/ and sources/.")
# The version of the code running (kb.__version__, also the distribution's: pyproject reads it), so a
# checkout run without installing answers too.
@click.version_option(version=__version__, prog_name="kb (flashattention-kb)")
@click.pass_context
def cli(ctx: click.Context, db: str | None, root: Path | None) -> None:
    """kb: a verified knowledge base of FlashAttention claims."""
    from kb.config import CORPUS_PARTS, NO_CORPUS, ConfigError, NoCorpus

    if root is not None and not any((root / part).is_dir() for part in CORPUS_PARTS):
        # Named explicitly but not a corpus: the same guidance, said before anything is written there.
        ctx.obj = {"cfg": None, "no_corpus": NO_CORPUS.format(where=root)}
        return
    try:
        ctx.obj = {"cfg": load_config(root.resolve() if root else None, db)}
    except NoCorpus as exc:
        # Only the commands that need a corpus fail (exit 2, through _cfg); `kb init` and --help do not.
        ctx.obj = {"cfg": None, "no_corpus": str(exc)}
    except ConfigError as exc:
        raise BadInput(str(exc)) from None


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Make a corpus to work in: copy the one that comes with kb (claims, sources, evidence, verifiers, site) into DIRECTORY.

    An installed kb carries the corpus it was built from; run from a source checkout, kb copies the checkout's.
    DIRECTORY must be new or empty. Then `cd DIRECTORY` (or set KB_ROOT) and every command reads it.

    Example: kb init ~/fa-kb && cd ~/fa-kb && kb claims -g fa2 --arch A100
    """
    from kb.config import copy_corpus, packaged_corpus
    from kb.fsutil import OutputError, replaced_dir

    source = packaged_corpus()
    if source is None:
        raise BadInput("this kb carries no corpus (an install built without it): clone the project's repository "
                       "and run kb inside it, or point --root / KB_ROOT at a corpus")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BadInput(f"{directory} exists and is not an empty folder: name a new one (kb init never overwrites)")
    if blocker := next((p for p in directory.absolute().parents if p.exists() and not p.is_dir()), None):
        raise BadInput(f"cannot make {directory}: {blocker} is a file, not a folder")
    try:
        with replaced_dir(directory) as building:  # whole or not at all: a failed copy leaves nothing half made
            names = copy_corpus(source, building)
    except OutputError as exc:
        raise MachineError(str(exc)) from None
    claims_n = sum(1 for _ in (directory / "claims").glob("*.yaml"))
    echo(f"made a corpus in {directory}: {', '.join(names)} ({claims_n} claim files, from {source})", err=True)
    echo(f"next: cd {directory} && kb claims   (or: export KB_ROOT={directory.absolute()})", err=True)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Problems as JSON.")
@click.pass_context
def validate(ctx: click.Context, as_json: bool) -> None:
    """Check every claim and source file; exit 2 with file:line errors.

    Example: `kb validate`
    """
    from kb.index.query import cause_problems
    from kb.index.store import check_files

    corpus, _, _, problems = check_files(_cfg(ctx))
    # Every refuted claim needs a cause, and none may be the KB's own extraction error (read from the index,
    # which holds the statuses; only when the files themselves are sound enough to index).
    verdicts = cause_problems(_index(ctx).db) if not any(p.blocking for p in problems) else []
    if as_json:
        emit_json({"claims": len(corpus.claims), "sources": len(corpus.sources),
                   "problems": [p.__dict__ for p in problems] + [{"message": v} for v in verdicts]})
    else:
        for p in problems:
            echo(str(p), err=True)
        for v in verdicts:
            echo(v, err=True)
    if problems or verdicts:
        raise BadInput(f"{len(problems) + len(verdicts)} problem(s) found")
    echo(f"ok: {len(corpus.claims)} claims, {len(corpus.sources)} sources", err=True)


_ROW_FIELDS = ("id", "generation", "status", "strength", "statement")


def _claim_rows(rows: list[dict[str, Any]], fmt: str, total: int | None = None, wide: bool = False) -> None:
    """Render claim rows as a table (stderr: the count), JSON, newline JSON, CSV or TSV."""
    if fmt == "json":
        emit_json(rows)
    elif fmt == "nl":
        import json

        for r in rows:
            echo(json.dumps(r))
    elif fmt in ("csv", "tsv"):
        import csv

        flat = [{k: (safe(",".join(v) if isinstance(v, list) else v) if isinstance(v, (str, list)) else v)
                 for k, v in r.items()} for r in rows]
        fields = list(rows[0]) if rows else list(_ROW_FIELDS)
        w = csv.DictWriter(sys.stdout, fieldnames=fields, dialect="excel-tab" if fmt == "tsv" else "excel",
                           lineterminator="\n")
        w.writeheader()
        w.writerows(flat)
    else:
        # Fits the terminal (or COLUMNS): the statement wraps, never cut; --wide or a pipe keeps one line per claim.
        echo(fitted_table([(r["id"], r["generation"], r["status"], r["strength"] or "", r["statement"]) for r in rows],
                          ["id", "gen", "status", "strength", "statement"], None if wide else term_width()))
        echo(f"{len(rows)} claim(s)", err=True)
    if total is not None and total > len(rows):
        # A cut listing says so, whatever the format (on stderr, so piped data stays clean).
        echo(f"showing {len(rows)} of {total} matching claims; raise --limit to see more", err=True)


def _formats(f):
    """--json / --nl / --csv / --tsv on a listing command (one at most)."""
    for flag, text in (("tsv", "Tab-separated values with a header row."), ("csv", "CSV with a header row."),
                       ("nl", "Newline-delimited JSON."), ("json", "A JSON array.")):
        f = click.option(f"--{flag}", f"fmt_{flag}", is_flag=True, help=text)(f)
    return f


def _fmt(ctx: click.Context, kwargs: dict[str, Any]) -> str:
    chosen = [k[4:] for k in ("fmt_json", "fmt_nl", "fmt_csv", "fmt_tsv") if kwargs.pop(k, False)]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}", ctx=ctx)
    return chosen[0] if chosen else "table"


def _suggest(value: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(value, known, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


class _Choice(click.Choice):
    """click.Choice that names the closest values, as --source does, before listing them all (exit 2)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The value in its canonical case; a usage error with suggestions otherwise."""
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            hint = _suggest(str(value).lower(), [str(c).lower() for c in self.choices])
            self.fail(f"{value!r} is not one of {', '.join(map(str, self.choices))}{hint}", param, ctx)


def _choice(values: tuple[str, ...]) -> click.Choice:
    return _Choice(values, case_sensitive=False)


_STATUS_HELP = "; ".join(f"{k}: {v}" for k, v in STATUS_MEANINGS.items())
# (option, dest, choices or None, metavar, help): every one also has a negation --not-<option>.
_FILTER_OPTIONS: tuple[tuple[str, str, tuple[str, ...] | None, str, str], ...] = (
    ("generation", "generation", GENERATIONS, "GEN", "Generation (any case)."),
    ("topic", "topic", TOPICS, "TOPIC", "Topic."),
    ("phase", "phase", PHASES, "PHASE", "Phase: forward, backward, both, n/a."),
    ("label", "label", LABELS, "LABEL", "How the note knows it."),
    ("status", "status", STATUSES, "STATUS", f"Derived status ({_STATUS_HELP})."),
    ("source", "source", None, "ID", "Anchored in this source id (`kb sources` lists them)."),
    ("arch", "arch", None, "ARCH|GPU",
     "The scope names this architecture: sm_80, sm_90a, or a GPU name or SKU resolved through the hardware "
     "sheets in sources/ (A100 is sm_80; H100 and H200 sm_90; B200 sm_100). sm_90 and GPU names include sm_90a."),
    ("strength", "strength", GRADES, "GRADE", "The verdict rests on evidence of this grade."),
    ("rests-on", "rests_on", RESTS, "STATE", "The depends_on chain rests on a claim in this state (refuted: the blast radius)."),
)


def _claim_filters(f: Any) -> Any:
    """The filters `kb claims` and `kb search` share: each repeatable (any of its values), each with --not-X."""
    f = click.option("--waiting-for", "waiting_for", multiple=True, metavar="GPU|ARCH|any",
                     help="Needs hardware that names this GPU or architecture (needs-hardware claims, and verified "
                          "ones with a GPU check still pending): --waiting-for A100 lists what an A100 would decide; "
                          "`any` lists those that need a GPU of any kind.")(f)
    f = click.option("--not-waiting-for", "not_waiting_for", multiple=True, metavar="GPU|ARCH|any",
                     help="Leave out claims matching --waiting-for VALUE (repeat for several).")(f)
    for name, dest, choices, metavar, text in reversed(_FILTER_OPTIONS):
        kind = _choice(choices) if choices else None
        shown = None if choices else metavar  # a choice lists its values, as click shows them
        f = click.option(f"--not-{name}", f"not_{dest}", multiple=True, type=kind, metavar=metavar,
                         help=f"Leave out claims matching --{name} VALUE (repeat for several).")(f)
        decls = [f"--{name}", *(["-g"] if name == "generation" else ["-t"] if name == "topic" else [])]
        f = click.option(*decls, dest, multiple=True, type=kind, metavar=shown,
                         help=f"{text} Repeat for any of several.")(f)
    return f


def _find(ctx: click.Context, kwargs: dict[str, Any], text: str | None = None, quote: bool = False,
          limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Run the shared filters over the index; unknown sources, GPUs and FTS syntax are exit 2 with a hint."""
    from kb.index.query import FILTERS, FilterError, find_claims, resolve_archs, source_ids

    db = _index(ctx).db
    keep = {k: kwargs.pop(k) for k in FILTERS if kwargs.get(k)}
    drop = {k: kwargs.pop(f"not_{k}") for k in FILTERS if kwargs.get(f"not_{k}")}
    for k in FILTERS:  # the empty ones
        kwargs.pop(k, None)
        kwargs.pop(f"not_{k}", None)
    known = source_ids(db)
    for flag, src in [("--source", s) for s in keep.get("source", ())] + [("--not-source", s) for s in drop.get("source", ())]:
        if src not in known:
            raise BadInput(f"{flag} {src!r}: no such source{_suggest(src, known)}; `kb sources` lists them")
    for prefix, given in (("--", keep), ("--not-", drop)):
        for key in ("arch", "waiting_for"):
            try:
                resolve_archs(db, given.get(key))
            except FilterError as exc:
                raise BadInput(f"{prefix}{key.replace('_', '-')} {exc}") from None
    try:
        rows, total = find_claims(db, keep, drop, text=text, quote=quote, limit=limit)
    except FilterError as exc:  # the search text
        raise BadInput(str(exc)) from None
    if not total:
        # An empty answer says why a status filter can be empty, rather than leaving a silent zero.
        alone = set(keep) == {"status"} and not drop and text is None
        for st in keep.get("status", ()):
            what = f"no claim is {st} here" if alone else f"no {st} claim matches the other filters"
            echo(f"{what} ({st}: {STATUS_MEANINGS[st]})", err=True)
    return rows, total


@cli.command()
@_claim_filters
@click.option("--limit", type=click.IntRange(1, None), help="At most this many claims (the count of all is on stderr).")
@click.option("--wide", is_flag=True, help="One line per claim, nothing wrapped (the table otherwise fits the terminal).")
@_formats
@click.pass_context
def claims(ctx: click.Context, limit: int | None, wide: bool, **filters: Any) -> None:
    """List claims; filters combine with AND, repeated values of one filter with OR, --not-X leaves out.

    Examples: kb claims -g fa2 --arch A100 --not-status verified;
    kb claims --waiting-for H200 --csv
    """
    fmt = _fmt(ctx, filters)
    rows, total = _find(ctx, filters, limit=limit)
    _claim_rows(rows, fmt, total=total, wide=wide)


@cli.command()
@click.argument("text")
@_claim_filters
@click.option("--quote", is_flag=True, help="Search for the words as written (FTS5 operators and quotes read as text).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000), help="At most this many results.")
@click.option("--wide", is_flag=True, help="One line per claim, nothing wrapped.")
@_formats
@click.pass_context
def search(ctx: click.Context, text: str, quote: bool, limit: int, wide: bool, **kwargs: Any) -> None:
    """Full-text search over claim ids, statements and review reasons, best match first; the filters of `kb claims`.

    TEXT is SQLite FTS5 syntax (words, "a phrase", OR, NOT, NEAR(), prefix*), as sqlite-utils search takes it;
    --quote reads it as plain words.

    Examples: kb search 'dq_accum OR "atomic add"' -g fa2;
    kb search --quote "fa2.bwd.dq-atomic"
    """
    fmt = _fmt(ctx, kwargs)
    rows, total = _find(ctx, kwargs, text=text, quote=quote, limit=limit)
    _claim_rows(rows, fmt, total=total, wide=wide)


@cli.command()
@click.argument("claim_id")
@click.option("--json", "as_json", is_flag=True, help="The claim, its statuses and evidence as one JSON document.")
@click.pass_context
def show(ctx: click.Context, claim_id: str, as_json: bool) -> None:
    """One claim: statement, scope, anchors, checks, status per hardware class, evidence.

    Example: `kb show fa2.bwd.dq-atomic-accumulation --json`
    """
    from kb.index.query import get_claim

    rec = get_claim(_index(ctx).db, claim_id)
    if rec is None:
        from kb.index.query import claim_ids

        hint = _suggest(claim_id, claim_ids(_index(ctx).db))
        raise BadInput(f"no claim with id {claim_id!r}{hint or ' (try `kb search`)'}")
    if as_json:
        from kb.index.query import batches

        emit_json({**rec, "batches": batches(rec)})
        return
    echo(f"{rec['id']}  [{rec['generation']} / {rec['phase']} / {rec['label']}]  {rec['file']}:{rec['line']}")
    echo(f"  {rec['statement']}")
    scope = {k: v for k, v in rec.get("scope", {}).items() if v}
    if scope:
        echo("  scope: " + "; ".join(f"{k}={v}" for k, v in scope.items()))
    echo("  topics: " + ", ".join(rec["topics"]))
    echo("anchors:")
    for a in rec["anchors"]:
        where = a.get("path") or ""
        if a.get("lines"):
            where += f":{a['lines'][0]}-{a['lines'][1]}"
        extra = a.get("heading") or (f"slide {a['slide']}" if a.get("slide") else "") or a.get("sha", "")[:12] or ""
        loc = next((f"{k} {a[k]}" for k in ("section", "figure", "table", "equation", "algorithm") if a.get(k)), "")
        echo(f"  - {a['source']} {where} {extra} {loc}".rstrip())
    echo("checks:" if rec.get("checks") else f"review-only: {rec.get('review')}")
    for i, c in enumerate(rec.get("checks", [])):
        echo(f"  {i}. {c['verifier']} {c.get('params', {})} expect {c.get('expect', {})}")
    rests = rec.get("rests") or {}
    for rel in ("depends_on", "refines", "supersedes"):
        edges = [e for e in rests.get("uses", []) if e["relation"] == rel]
        if edges:
            echo(f"{rel.replace('_', ' ')}: " + ", ".join(f"{e['claim']} ({e['status']})" for e in edges))
    if rests.get("state"):
        chain = " -> ".join(f"{c['claim']} ({c['status']})" for c in rests["chain"])
        echo(f"rests on: {rests['state']}" + (f", nearest {rests['via']}: {rec['id']} -> {chain}"
                                                    if rests["state"] != "verified" else " (every dependency verified)"))
    if rests.get("used_by"):
        echo("used by: " + ", ".join(f"{e['claim']} ({e['relation'].replace('_', ' ')})" for e in rests["used_by"][:12])
                   + (f" and {len(rests['used_by']) - 12} more" if len(rests["used_by"]) > 12 else ""))
    echo("status:")
    for s in rec["status"]:
        grade = f"[{s['strength']}] " if s.get("strength") else ""
        echo(f"  {s['hardware_class']:>24}  {s['status']:<14} {grade}{s['reason']}")
        if s.get("cause"):
            echo(f"  {'':>24}  {'cause: ' + s['cause']:<14} ({s.get('cause_by') or 'rule'}) {s.get('cause_why') or ''}")
        if s.get("grade_note"):
            echo(f"  {'':>24}  {'grade: ' + s['grade_note']:<14} {s.get('grade_note_why') or ''}")
        if s.get("upstream"):
            echo(f"  {'':>24}  {'(information)':<14} {s['upstream']}")
    from kb.index.query import batches

    if rows := batches(rec):
        echo("batches (every run under the current claim and verifier; the verdict is decided over all of them):")
        for b in rows:
            value = f"{b['value']:g}" if isinstance(b["value"], int | float) and not isinstance(b["value"], bool) \
                else str(b["value"])
            spread = f"  p20-p80 [{b['spread'][0]:g}, {b['spread'][1]:g}]" if b.get("spread") else ""
            echo(f"  {b['started']}  {b['class']:<22} check {b['check']} {b['verdict']:<12} {b['measure']} = {value}{spread}")
    if rec["runs"]:
        echo("evidence:")
        for r in rec["runs"][:10]:
            echo(f"  {r['started']}  {r['hardware_class']:<22} check {r['check_index']} {r['verdict']:<12} {r['reason'][:80]}")
            if r.get("distrust"):
                echo(f"  {'':>25}  not counted: {r['distrust']}")


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="A JSON array.")
@click.pass_context
def sources(ctx: click.Context, as_json: bool) -> None:
    """Registered sources: papers, repositories and pins, notes, web pages, hardware (`kb sources fetch` clones them)."""
    if ctx.invoked_subcommand is not None:
        return
    from kb.index.query import list_sources

    rows = list_sources(_index(ctx).db)
    if as_json:
        emit_json(rows)
        return

    def pin(s: dict[str, Any]) -> str:
        if s["kind"] == "paper":
            return f"arXiv:{s['arxiv']}v{s['version']}"
        if s["kind"] == "repo":
            return ", ".join(f"{k}={v[:10]}" for k, v in s.get("pins", {}).items())
        if s["kind"] == "notes":
            return s["commit"][:12]
        return s.get("url", "") or s.get("title", "")

    echo(table([(s["id"], s["kind"], s["anchors"], pin(s)) for s in rows], ["id", "kind", "anchors", "pin"]))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="What this machine can run, as JSON.")
@click.pass_context
def hw(ctx: click.Context, as_json: bool) -> None:
    """What this machine is and which verifier kinds it can run.

    Example: `kb hw --json`
    """
    from kb.verify.hw import capabilities, probe
    from kb.verify.registry import load_verifiers

    env = probe()
    can = env["can_run"] = capabilities(env, load_verifiers(_cfg(ctx).verifiers_dir))
    if as_json:
        emit_json(env)
        return
    echo(f"host      {env['host']} ({env['os']}, {env['cpu_count']} CPUs, Python {env['python']})")
    if env["gpus"]:
        for g in env["gpus"]:
            echo(f"gpu       {g['name']} sm_{g['compute_capability']} {g['memory_mib']} MiB, driver {g['driver']}")
        if "gpu" in env:
            echo(f"cuda      {env['gpu']['sm_count']} SMs, CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')}")
    else:
        echo("gpu       none (GPU checks will be reported as needs-hardware)")
    echo("packages  " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    echo(f"sandbox   {env['sandbox']}")
    for kind, ok in can.items():
        echo(f"{'can' if ok else 'cannot':>6} run {kind}")


@cli.command()
@click.option("--claim", "claim_ids", multiple=True, help="Claim id (repeatable).")
@click.option("--generation", "-g", "generations", multiple=True, type=_choice(GENERATIONS),
              help="Only claims of this generation (any case; repeatable: any of them).")
@click.option("--topic", "-t", "topics", multiple=True, type=_choice(TOPICS),
              help="Only claims with this topic (repeatable: any of them).")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(VERIFIER_KINDS),
              help="Only checks of this verifier kind (repeatable), e.g. cpu-check, gpu-benchmark.")
@click.option("--verifier", "verifier_ids", multiple=True, metavar="ID",
              help="Only checks of this verifier (repeatable, with --kind: either), e.g. code.launch-trace.")
@click.option("--plan", "plan_only", is_flag=True, help="Show what would run and why others are skipped.")
@click.option("--force", is_flag=True, help="Re-run checks that have current evidence.")
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 64), help="Parallel CPU workers.")
@click.option("--timeout", type=float, callback=lambda c, p, v: _positive_seconds(v),
              help="Per-check timeout in seconds, > 0 (default: each verifier's own).")
@click.option("--online", is_flag=True, help="Fetch cited files of GitHub-hosted sources that have no local clone.")
@click.option("--fail-on", "fail_on", type=_choice(("new", "refuted", "never")), default="new", show_default=True,
              help="When a finding is exit 1. new: a selected claim's verdict is worse than the baseline's (refuted "
                   "where it was not, or no longer verified where it was); refuted: any selected check refutes, "
                   "the corpus's known findings included; never: findings are exit 0. Exit 2, 3 and 130 stand.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The verdicts --fail-on new compares with (default: the project's STATUS.json, which "
                   "`kb export status` writes; without one, every refuted claim is new).")
@click.option("--json", "as_json", is_flag=True, help="The run summary as JSON.")
@click.pass_context
def verify(ctx: click.Context, claim_ids: tuple[str, ...], generations: tuple[str, ...], topics: tuple[str, ...],
           kinds: tuple[str, ...], verifier_ids: tuple[str, ...], plan_only: bool, force: bool, jobs: int,
           timeout: float | None, online: bool, fail_on: str, baseline_path: Path | None, as_json: bool) -> None:
    """Run the checks this machine can run; record evidence; print a summary.

    Exit 1 on a finding as --fail-on says: by default a verdict worse than the committed STATUS.json, so
    the refutations the corpus publishes on purpose do not fail `kb verify && ...`.

    Example: `kb verify -g fa2 --kind pinned-code --plan`
    """
    import os

    from kb.verify.session import UnknownClaim
    from kb.verify.session import verify as run_verify

    if online:
        os.environ["KB_ONLINE"] = "1"  # read by the plan and inherited by the workers

    from kb.export import baseline

    cfg = _cfg(ctx)
    base_file = baseline_path or cfg.root / baseline.NAME
    try:  # read before the run: a broken baseline is bad input, found before minutes of checks
        base = baseline.read(base_file) if fail_on == "new" and not plan_only else None
    except baseline.BaselineError as exc:
        raise BadInput(str(exc)) from None
    if baseline_path is not None and fail_on == "new" and base is None and not plan_only:
        raise BadInput(f"--baseline {baseline_path}: no such file (`kb export status` writes STATUS.json)")
    if verifier_ids:
        import difflib

        from kb.verify.registry import load_verifiers

        known = load_verifiers(cfg.verifiers_dir)
        for v in verifier_ids:
            if v not in known:
                near = difflib.get_close_matches(v, list(known), n=3)
                raise BadInput(f"--verifier {v}: no such verifier" + (f"; did you mean {', '.join(near)}?" if near else ""))
    idx = _index(ctx)
    try:
        result = run_verify(cfg, idx, claim_ids, generations, topics, set(kinds) | set(verifier_ids) or None, plan_only,
                            force, jobs, timeout, progress=_progress)
    except UnknownClaim as exc:
        raise BadInput(str(exc)) from None
    if plan_only:
        _render_plan(result.plan, as_json)
        ctx.exit(0)
    _render_verify(result, as_json, _rerun_command(claim_ids, generations, topics, kinds, online))
    ctx.exit(_verify_exit(result, idx, fail_on, base, base_file, claim_ids, generations, topics))


def _verify_exit(result: Any, idx: Any, fail_on: str, base: dict[str, str] | None, base_file: Path,
                 claim_ids: tuple[str, ...], generations: tuple[str, ...], topics: tuple[str, ...]) -> int:
    """kb verify's exit status: 130/143 interrupted and 3 harness errors always; a finding as --fail-on says."""
    from kb.export import baseline
    from kb.verify.session import select_claims

    code = result.exit_code  # 1: some selected check refutes (run here or reused)
    if code not in (0, 1):  # a fault that no --fail-on hides
        return code
    if fail_on == "never":
        return 0
    if fail_on == "refuted":
        return code
    # new: a verdict can get worse with no check refuting (verified -> inconclusive), so always compare.
    if base is None:
        echo(f"kb: no baseline at {base_file} (`kb export status` writes it): every refuted claim counts as new",
             err=True)
        base = {}
    selected = select_claims(idx.corpus(), claim_ids, generations, topics)
    worse = baseline.regressions(base, baseline.current(idx.db), selected)
    for r in worse:
        echo(f"worse than {base_file.name}: {r}", err=True)
    if not worse and code:
        echo(f"no verdict worse than {base_file.name}: the refutations found are already on record "
             "(--fail-on refuted fails on them)", err=True)
    return 1 if worse else 0


def _rerun_command(claim_ids: tuple[str, ...], generations: tuple[str, ...], topics: tuple[str, ...],
                   kinds: tuple[str, ...], online: bool) -> str:
    """The `kb verify` that re-runs this selection here, reused results included (`--force`)."""
    import shlex

    args = ["kb", "verify", "--force"]
    for flag, values in (("--claim", claim_ids), ("-g", generations), ("-t", topics), ("--kind", kinds)):
        for v in values:
            args += [flag, v]
    return shlex.join(args + (["--online"] if online else []))


@sources.command("fetch")
@click.argument("ids", nargs=-1)
@click.pass_context
def sources_fetch(ctx: click.Context, ids: tuple[str, ...]) -> None:
    """Clone the pinned repositories into .kb/clones (partial, idempotent); exit 3 if some could not be fetched.

    Example: `kb sources fetch flash-attention cutlass`
    """
    from kb.pinned.fetch import fetch_sources

    cfg = _cfg(ctx)
    try:
        results = fetch_sources(cfg, _index(ctx).corpus().sources, list(ids) or None,
                                progress=lambda line: echo(line, err=True))
    except KeyError as exc:
        raise BadInput(f"source {exc.args[0]!r} is not registered (see `kb sources`)") from None
    # Each failure was printed once, as it happened (with why); the summary names them only.
    failed = [r for r in results if not r.ok]
    ok = len(results) - len(failed)
    echo(f"{ok} source(s) ready, {len(failed)} not" + (f" ({', '.join(r.source for r in failed)}); the checks that "
                                                       "read them will be skipped" if failed else ""), err=True)
    ctx.exit(3 if failed else 0)


def _positive_seconds(v: float | None) -> float | None:
    import math

    if v is not None and not (math.isfinite(v) and v > 0):
        raise click.BadParameter(f"{v} is not a positive, finite number of seconds")
    return v


def _write_text(path: Path, text: str) -> None:
    """Write an export atomically (the old file stays whole on any failure).

    A folder that does not exist is the user's input (exit 2); a full disk, a permission or a read-only
    file system raise kb.fsutil.OutputError, which `main` reports as exit 3.
    """
    from kb.fsutil import OutputError, atomic_write_text

    if not str(path).strip() or path.is_dir():
        raise BadInput(f"cannot write {str(path) or repr('')}: name a file, not a folder")
    if not path.parent.is_dir():
        raise BadInput(f"cannot write {path}: {path.parent} is not a folder")
    try:
        atomic_write_text(path, text)
    except OutputError as exc:
        raise MachineError(str(exc)) from None


def _progress(total: int) -> Any:
    """The progress callback for `total` checks (stderr: a bar on a terminal, else refutations and errors)."""
    from collections import Counter

    done, tty = Counter(), sys.stderr.isatty()

    def tick(task: Any, run: Any) -> None:
        done["n"] += 1
        done[run.verdict] += 1
        if tty:
            width = 30
            fill = int(width * done["n"] / max(total, 1))
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done['n']}/{total} "
                             f"supports {done['supports']} refutes {done['refutes']} errors {done['error']}  ")
            sys.stderr.flush()
        elif run.verdict in ("refutes", "error"):
            sys.stderr.write(safe(f"{run.verdict}: {task.key} {run.reason[:120]}") + "\n")

    return tick


def _render_plan(plan: Any, as_json: bool) -> None:
    rows = [(t.key, t.spec.id, "cached" if t.cached else "run", t.hardware_class) for t in plan.tasks]
    rows += [(f"{c}#{i}", v, "skip", why) for c, i, v, why in plan.skipped]
    if as_json:
        emit_json([dict(zip(("check", "verifier", "action", "why"), r, strict=True)) for r in rows])
        return
    echo(table(rows, ["check", "verifier", "action", "why / hardware class"]))
    echo(f"{len(plan.to_run)} to run, {len(plan.tasks) - len(plan.to_run)} cached, "
               f"{len(plan.skipped)} skipped", err=True)


def _span(origin: dict[str, Any]) -> str:
    """A date range of recorded runs, one date when they share it."""
    return origin["first"] if origin["first"] == origin["last"] else f"{origin['first']}..{origin['last']}"


def _render_verify(result: Any, as_json: bool, rerun: str = "kb verify --force") -> None:
    """The summary of a verify run: the status table on stdout; on stderr one line each for what was checked
    here, what was reused from earlier evidence (hardware class, dates), what was skipped (every reason, with
    counts), and the command that re-runs the reused checks here."""
    from collections import Counter

    if sys.stderr.isatty() and result.plan.to_run:
        sys.stderr.write("\n")
    if result.interrupted:
        echo(f"interrupted: {len(result.new)} finished run(s) recorded; the rest did not run", err=True)
        return
    summary = result.summary()
    if as_json:
        emit_json({**summary, "rerun_command": rerun if summary["cached"] else None})
        return
    echo(table(sorted(result.status_counts.items()), ["status", "claims"]))
    echo("the status table counts every claim, from all evidence on record (this run's, earlier and imported runs)",
         err=True)
    new = Counter(r.verdict for r in result.new)
    if summary["ran"]:
        echo(f"checked here: {summary['ran']} check(s) ran on this machine ({', '.join(summary['ran_on'])}): "
             + ", ".join(f"{k} {v}" for k, v in sorted(new.items())) + f"; {result.seconds:.1f} s", err=True)
    else:
        echo("checked here: nothing - no check ran on this machine", err=True)
    if summary["cached"]:
        origins = "; ".join(f"{o['runs']} on {o['hardware_class']} ({_span(o)})" for o in summary["cached_from"])
        cached = Counter(r.verdict for r in result.cached)
        echo(f"reused, not re-run: {summary['cached']} result(s) recorded earlier (committed or imported evidence): "
             f"{origins}; " + ", ".join(f"{k} {v}" for k, v in sorted(cached.items())), err=True)
    if summary["skipped"]:
        reasons = summary["skipped_by_reason"]
        echo(f"skipped: {summary['skipped']} check(s) this machine cannot run now, for {len(reasons)} reason(s):",
             err=True)
        width = len(str(reasons[0]["checks"]))
        for r in reasons:
            echo(f"  {r['checks']:>{width}}  {r['why']}", err=True)
        if summary["skipped_recorded_elsewhere"]:
            echo("  results on record for skipped checks, made elsewhere: "
                 + "; ".join(f"{o['runs']} on {o['hardware_class']} ({_span(o)})"
                             for o in summary["skipped_recorded_elsewhere"]), err=True)
    else:
        echo("skipped: none", err=True)
    if result.prefetch is not None and result.prefetch.failed:
        for where, why in sorted(result.prefetch.failed.items()):
            echo(f"--online: could not fetch {where}: {why}", err=True)
    for cid in summary["refuted"]:
        echo(f"refuted: {cid}", err=True)
    if summary["cached"]:
        echo(f"to check the {summary['cached']} reused result(s) on this machine: {rerun}", err=True)


@cli.group()
def evidence() -> None:
    """Evidence records: import runs made on other machines."""


@evidence.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def evidence_import(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Merge evidence files (content-addressed: re-importing adds nothing).

    Example: `kb evidence import other-host/evidence/*/*.json`
    """
    from kb.verify.evidence import import_files

    known = set(_index(ctx).corpus().claims)
    new, dup, problems, unknown = import_files(_cfg(ctx).root, list(files), known)
    for p in problems:
        echo(str(p), err=True)
    if problems:
        raise BadInput("nothing imported: fix the files above")
    _index(ctx)
    if unknown:
        echo(f"note: {len(unknown)} imported claim id(s) are not in this knowledge base: "
                   + ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else ""), err=True)
    echo(f"imported {new} new run(s); {dup} already known", err=True)


@cli.group()
def export() -> None:
    """Exports: STATUS.md, the static site, the provenance graph."""


@export.command("status")
@click.option("--check", is_flag=True, help="Exit 1 if the committed file (or its STATUS.json) differs from a fresh export.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (default STATUS.md in the project, with STATUS.json beside it).")
@click.pass_context
def export_status(ctx: click.Context, check: bool, output: Path | None) -> None:
    """Write STATUS.md from the knowledge base, and the project's STATUS.json (the baseline of `kb verify --fail-on new`).

    Example: `kb export status --check`
    """
    from kb.config import ConfigError
    from kb.export import baseline
    from kb.export.status_md import render_status

    cfg = _cfg(ctx)
    try:
        site_url = cfg.site_url
    except ConfigError as exc:
        raise BadInput(str(exc)) from None
    db = _index(ctx).db
    out = output or cfg.root / "STATUS.md"
    # The project's own STATUS.md carries its machine-readable twin; an export elsewhere (-o) is the Markdown only.
    files = [(out, render_status(db, site_url))] + ([] if output else [(cfg.root / baseline.NAME, baseline.render(db))])
    if check:
        stale = [p for p, text in files if (p.read_text() if p.exists() else "") != text]
        for p in stale:
            echo(f"{p} is out of date: run `kb export status`", err=True)
        if stale:
            ctx.exit(1)
        echo(" and ".join(str(p) for p, _ in files) + " up to date", err=True)
        return
    for p, text in files:
        _write_text(p, text)
        echo(f"wrote {p}", err=True)


@export.command("site")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write the site into (created if missing).")
@click.option("--previous", metavar="FILE|URL",
              help="An earlier export's claims.json (a file, or the published site's URL) for the dashboard's "
                   "'changes since the previous export'; default: the claims.json already in the output folder. "
                   "An unreachable URL is reported and the section says so.")
@click.pass_context
def export_site(ctx: click.Context, output: Path, previous: str | None) -> None:
    """Build the static site into a folder.

    Example: `kb export site -o _site --previous https://example.github.io/kb/claims.json`
    """
    from kb.export.site.build import build_site, read_previous

    start = time.perf_counter()
    if output.exists() and not output.is_dir():
        raise BadInput(f"{output} is a file, not a folder")
    if blocker := next((p for p in output.absolute().parents if p.exists() and not p.is_dir()), None):
        raise BadInput(f"cannot write the site to {output}: {blocker} is a file, not a folder")
    if output.absolute() == Path.cwd() or not str(output).strip():
        raise BadInput("the site needs a folder of its own (not the current folder): name one with -o")
    try:
        prev_text, note = read_previous(previous)
    except OSError as exc:
        raise BadInput(f"--previous {previous}: {exc.strerror or exc}") from None
    if note:
        echo(f"{note}; comparing with {output} instead", err=True)
    from kb.fsutil import OutputError, is_environment_error

    try:
        n = build_site(_index(ctx).db, _cfg(ctx), output, prev_text)
    except OSError as exc:
        if isinstance(exc, OutputError) or is_environment_error(exc):
            raise MachineError(str(exc)) from None  # the machine, not the input: exit 3
        raise BadInput(f"cannot write the site to {output}: {exc.strerror or exc}") from None
    echo(f"wrote {n} page(s) to {output} in {time.perf_counter() - start:.2f} s", err=True)


@export.command("prov")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file, not stdout.")
@click.option("--base", envvar="KB_PROV_BASE", default="urn:kb:", show_default=True,
              help="IRI the identifiers live under, e.g. the published site's URL.")
@click.pass_context
def export_prov(ctx: click.Context, output: Path | None, base: str) -> None:
    """The provenance graph as W3C PROV-JSON.

    Example: kb export prov --base https://example.org/kb/ -o prov.json
    """
    import json

    from kb.export.prov import prov_document

    doc = prov_document(_index(ctx).db, base)
    text = json.dumps(doc, indent=1, sort_keys=True)
    if output:
        _write_text(output, text + "\n")
    else:
        sys.stdout.write(text + "\n")


@cli.command()
@click.option("--online/--offline", default=False, show_default=True,
              help="--online fetches upstream (git into kb's own cache under .kb/, GitHub, arXiv, web pages) and exits 3 "
                   "if some of it cannot be checked; offline (the default) uses local clones and caches and lists "
                   "what it could not check.")
@click.option("--backend", type=click.Choice(["git", "http"]), default="git", show_default=True,
              help="How repositories are compared: local clone cache (git) or GitHub's REST API (http).")
@click.option("--ref", "refs", multiple=True, metavar="[SOURCE=]REF",
              help="What-if: compare SOURCE's pins (every repository's without SOURCE=) with REF instead of its head; "
                   "repeatable. Leaves the committed record alone unless --write.")
@click.option("--write/--no-write", default=None,
              help="Record the result in evidence/audit/latest.json (default: yes, except for --ref what-if audits).")
@click.option("--record-web", is_flag=True, help="Fetch web sources that have no content hash and record it in sources/.")
@click.option("--json", "as_json", is_flag=True, help="The audit result as JSON.")
@click.pass_context
def audit(ctx: click.Context, online: bool, backend: str, refs: tuple[str, ...], write: bool | None, record_web: bool,
          as_json: bool) -> None:
    """Check pinned sources for drift; mark affected claims stale (exit 1 drifted, 3 could not check).

    Offline unless --online. Example: `kb audit --online`
    """
    from kb.audit.run import run_audit

    if record_web:
        from kb.audit.record import record_web as do_record

        results = do_record(_cfg(ctx).root)
        for sid, outcome in results:
            echo(f"{sid}: {outcome}", err=True)
        ctx.exit(3 if any(o.startswith("not recorded") for _, o in results) else 0)

    ref_map = dict(r.split("=", 1) if "=" in r else ("*", r) for r in refs)
    known = set(_index(ctx).corpus().sources)
    unknown = [s for s in ref_map if s != "*" and s not in known]
    if unknown:
        raise BadInput(f"--ref names source {unknown[0]!r}, which is not registered (see `kb sources`)")
    ctx.exit(run_audit(_cfg(ctx), _index(ctx).db, offline=not online, backend=backend, refs=ref_map, write=write,
                       as_json=as_json))


@cli.command()
@click.argument("claim_id", required=False)
@click.option("--depth", default=2, show_default=True, type=click.IntRange(0, 50),
              help="With CLAIM_ID: relation steps around it, either direction.")
@click.option("--note", help="Only claims anchored in this note (e.g. fa2-backward or docs/notes/fa2-backward.md).")
@click.option("--format", "fmt", type=click.Choice(["json", "dot", "svg"]), default="json", show_default=True,
              help="json (networkx node-link), dot (Graphviz) or svg (laid out in Python).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file instead of stdout.")
@click.pass_context
def graph(ctx: click.Context, claim_id: str | None, depth: int, note: str | None, fmt: str, output: Path | None) -> None:
    """The claim graph (depends_on, refines, supersedes): a claim's neighbourhood, a note, or every related claim.

    Example: `kb graph fa2.bwd.dq-atomic-accumulation --depth 2 --format svg > g.svg`
    """
    from kb.export.graph import by_note, graph_text, load_graph, neighbourhood

    g = load_graph(_index(ctx).db)
    if claim_id is not None:
        if claim_id not in g.nodes:
            from kb.index.query import claim_ids

            hint = _suggest(claim_id, claim_ids(_index(ctx).db))
            raise BadInput(f"no claim with id {claim_id!r}{hint or ' (try `kb search`)'}")
        g = neighbourhood(g, claim_id, depth)
    elif note:
        path = note if note.startswith("docs/") else f"docs/notes/{note.removesuffix('.md')}.md"
        g = by_note(g, path)
        if not g.nodes:
            raise BadInput(f"no related claims anchored in {path}")
    else:
        linked = {n for a, b, _ in g.edges for n in (a, b)}
        g.nodes = {n: d for n, d in g.nodes.items() if n in linked}
    text = graph_text(g, fmt)
    if output:
        _write_text(output, text)
        echo(f"wrote {len(g.nodes)} nodes, {len(g.edges)} edges to {output}", err=True)
    else:
        sys.stdout.write(text)


@cli.command()
@click.argument("source_id")
@click.argument("pin")
@click.option("--to", "ref", required=True, help="The upstream ref (branch, tag or SHA) to advance the pin to.")
@click.option("--write", is_flag=True, help="Apply the edits (default: a dry run printing the plan and the YAML diff).")
@click.option("--json", "as_json", is_flag=True, help="The plan (or what was applied) as JSON.")
@click.pass_context
def repin(ctx: click.Context, source_id: str, pin: str, ref: str, write: bool, as_json: bool) -> None:
    """Advance a tracking pin (or the notes commit: PIN `commit`) to a newer ref; re-anchor, re-check, report.

    Example: `kb repin flash-attention current-2026-07-22 --to main`
    """
    from kb.index.store import check_files
    from kb.maintain.repin import RepinError, plan_repin, write_repin

    cfg = _cfg(ctx)
    try:
        plan = plan_repin(cfg, _index(ctx), source_id, pin, ref)
    except RepinError as exc:
        raise BadInput(str(exc)) from None
    rows = [(o.claim_id, o.outcome, o.detail[:110]) for o in plan.outcomes]
    counts = {k: sum(1 for o in plan.outcomes if o.outcome == k) for k in
              ("advanced", "changed upstream", "checks fail at the new ref", "not re-verified")}
    if as_json:
        emit_json({"source": source_id, "pin": pin, "from": plan.old_sha, "to": plan.new_sha, "counts": counts,
                   "kept_as": plan.kept_as,
                   "claims": [{"id": o.claim_id, "outcome": o.outcome, "detail": o.detail, "diff": o.diff}
                              for o in plan.outcomes],
                   "diff": plan.diff(cfg.root), "written": write})
    else:
        echo(table(rows, ["claim", "outcome", "detail"]))
        for o in plan.outcomes:
            if o.diff:
                echo(f"\n{o.claim_id}: {o.detail}\n{o.diff}")
        echo(plan.diff(cfg.root))
    echo(f"{source_id}@{pin}: {plan.old_sha[:12]} -> {plan.new_sha[:12]}; "
               + ", ".join(f"{v} {k}" for k, v in counts.items())
               + (f"; claims left behind keep {plan.old_sha[:12]} as {plan.kept_as} (tracking, so they read stale)"
                  if plan.kept_as else ""), err=True)
    if not write:
        echo("dry run: nothing written (pass --write to apply)", err=True)
        ctx.exit(1 if counts["changed upstream"] or counts["checks fail at the new ref"] else 0)
    problems = write_repin(cfg, plan, check_files)
    if problems:
        for p in problems:
            echo(p, err=True)
        raise BadInput("the edits did not validate; every file was restored")
    if plan.advanced:
        from kb.verify.evidence import write_batch

        runs = [r for o in plan.advanced for r in o.runs]
        if runs:
            write_batch(cfg.root, runs)  # the checks that held at the new ref are evidence for the re-anchored claims
    echo(f"wrote {len(plan.edits)} file(s); run `kb audit` to record the new state of the source", err=True)
    ctx.exit(1 if counts["changed upstream"] or counts["checks fail at the new ref"] else 0)


@cli.command()
@click.argument("source_id")
@click.argument("path")
@click.argument("where", nargs=-1)
@click.option("--sha", help="Commit to read (default: the notes source's pinned commit).")
@click.pass_context
def anchor(ctx: click.Context, source_id: str, path: str, where: tuple[str, ...], sha: str | None) -> None:
    """Print what an anchor must record: `kb anchor fa-notes docs/notes/x.md [SLUG]`,
    `kb anchor fa-notes docs/slides/x.html [SLIDE]` or
    `kb anchor flash-attention PATH START END --sha SHA` (reads the configured local clone)."""
    from kb.pinned.anchor import AnchorError, describe_anchor

    try:
        out = describe_anchor(_cfg(ctx), _index(ctx).corpus(), source_id, path, where, sha)
    except AnchorError as exc:
        raise BadInput(str(exc)) from None
    echo("\n".join(out))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="The findings as JSON instead of Markdown.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file (atomically).")
@click.pass_context
def errata(ctx: click.Context, as_json: bool, output: Path | None) -> None:
    """Every finding about the notes and decks, by note section and slide, fit to paste as an issue.

    A finding is a refuted claim whose cause is `note` or `deck`: what the source asserts (in kb's words),
    the evidence, what is true instead, links at the pinned commit and the pinned code lines.

    Example: `kb errata -o ERRATA.md`
    """
    import json

    from kb.export.errata import collect, render_markdown

    data = collect(_index(ctx).db)
    text = json.dumps(data, indent=1) + "\n" if as_json else render_markdown(data)
    if output:
        _write_text(output, text)
        echo(f"wrote {data['count']} finding(s) to {output}", err=True)
    elif as_json:
        emit_json(data)
    else:
        echo(text.rstrip("\n"))


@cli.command()
@click.option("--online", is_flag=True,
              help="Without a local clone of the notes, fetch them from GitHub (exit 3 if that fails).")
@click.option("--json", "as_json", is_flag=True, help="Coverage per note as JSON.")
@click.pass_context
def coverage(ctx: click.Context, online: bool, as_json: bool) -> None:
    """Which sections of the pinned notes have claims; exit 1 if a checkable section has none.

    Reads the local clone of the notes (`kb sources fetch fa-notes`); touches the network only with
    --online. Without the notes here and without --online: exit 2, saying how to get them.

    Example: `kb coverage --json`
    """
    from kb.audit.coverage import CoverageError, NeedsNotes
    from kb.audit.coverage import coverage as run_coverage

    try:
        files = run_coverage(_cfg(ctx), _index(ctx).db, online=online)
    except NeedsNotes as exc:
        # Offline by choice: the notes are missing here, which the user fixes (exit 2), not a failed check.
        raise BadInput(str(exc)) from None
    except CoverageError as exc:
        echo(f"coverage could not run: {exc}", err=True)
        ctx.exit(3)
    if as_json:
        emit_json([f.__dict__ for f in files])
    else:
        rows = [(f.path, len(f.covered), len(f.allowed), len(f.structural), len(f.missing), ", ".join(f.missing))
                for f in files]
        echo(table(rows, ["note", "covered", "allow-listed", "structural", "missing", "missing sections"]))
    ctx.exit(1 if any(f.missing for f in files) else 0)


INTERNAL_ERROR = 4
ENVIRONMENT_ERROR = 3


def main() -> None:
    """Console-script entry point: a crash is exit 4, never mistaken for a finding (exit 1); a file system
    that refuses an output (disk full, permissions, read-only) is exit 3 with one line naming the path."""
    import traceback

    from kb.fsutil import OutputError, is_environment_error

    try:
        cli(prog_name="kb")
    except Exception as exc:  # click has already handled usage errors and its own exceptions
        if isinstance(exc, OutputError) or is_environment_error(exc):
            path = getattr(exc, "filename", None)
            message = f"{path}: {exc.strerror}" if path and not isinstance(exc, OutputError) else str(exc)
            sys.stderr.write(f"kb: {safe(message)}\n")
            sys.exit(ENVIRONMENT_ERROR)
        traceback.print_exc()
        sys.stderr.write(f"kb: internal error (exit {INTERNAL_ERROR}); please report it with the traceback above\n")
        sys.exit(INTERNAL_ERROR)
