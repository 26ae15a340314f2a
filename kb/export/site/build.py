"""The static site: a pure function of the index, written as plain files.

Layout of the output folder (every link relative, so it works from file://
and from GitHub Pages, and nothing is fetched from another host):

    index.html          dashboard: counts, status by generation and label, hardware summary, the errata count
    claims.html         the claim list: its first page server-rendered; claims.js filters, sorts and pages it
                        from the index below, so 10,000 claims never become 10,000 table rows
    claims-all.html     every claim on one page, no script needed (what claims.html links to without JavaScript)
    claims.json         the filter index (one small record per claim)
    claims-index.js     the same index as a script, for file:// where fetch() of a file is refused
    claims/<id>.html    one page per claim
    matrix.html         claims x hardware class
    measurements.html   every measured GPU figure in one table (measurements.js sorts and filters it)
    measurements.csv    the same table as CSV
    generations.html    FA1 -> FA4 (and the other groupings)
    sources.html        every source and its pins
    notes.html          the notes and decks, with claim counts
    notes/<note>.html   one page per note: its sections in order, each with its claims (kb.export.site.readers)
    decks/<deck>.html   one page per deck: its slides in order, each with its claims and a link opening it at #N
    errata.html         the findings (kb errata's data) by note section and by deck slide
    glossary.html       what each status word, evidence grade, cause and "rests on" state means
    static/             stylesheet and script
    .nojekyll           GitHub Pages: serve files as they are

Templates and assets come from the project's site/ folder when it has one,
else from the site/ folder next to the kb package.

The whole site is built in a sibling folder and swapped in at the end
(kb.fsutil.replaced_dir): a kill or a full disk during an export leaves the
complete old site or the complete new one, never a mix. An unchanged file is
linked from the old site, so it keeps its mtime; files the build does not
write (a CNAME, say) are carried over, except claim pages whose claim is gone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import sqlite_utils
from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template
from markupsafe import Markup

from kb.config import Config, packaged_corpus
from kb.export.errata import collect as collect_errata
from kb.export.graph import RELATIONS, Graph, by_note, load_graph, neighbourhood, to_svg
from kb.export.site import matrix_sel
from kb.export.site.charts import gpu_charts
from kb.export.site.data import (
    SOURCE_KINDS,
    SiteData,
    anchor_view,
    constants_named,
    count_by,
    disagreements,
    facets,
    fmt_expect,
    fmt_value,
    generation_view,
    hardware_summary,
    index_json,
    load_site,
    pending_hardware,
    run_view,
    safe_url,
    source_links,
)
from kb.export.site.measurements import measurement_rows, measurements_context, to_csv
from kb.export.site.outline import Outline, read_outline
from kb.export.site.readers import (
    claim_locations,
    deck_pages,
    errata_page,
    glossary,
    note_pages,
    upstream_notice,
)
from kb.export.site.svg import Bar, stacked_bars, value_bars
from kb.export.site.teaching import teaching_sources, write_teaching
from kb.fsutil import replaced_dir
from kb.records.vocab import GENERATIONS, LABELS, PHASES, STATUSES, TOPICS

# The templates that came with kb: kb/_corpus/site in a wheel, the checkout's site/ otherwise (kb.config).
PACKAGE_SITE = (packaged_corpus() or Path(__file__).resolve().parents[3]) / "site"

# Evidence grades (kb/index/strength.py GRADES), strongest first, then claims no check decides.
STRENGTHS = ("measured", "derived", "cited", "restated", "none")
# Claims the list page renders on the server (the rest come from the index, one page at a time).
PAGE_SIZE = 100


def site_dir(cfg: Config) -> Path:
    """The folder holding templates/ and static/: the project's own, else the one shipped with kb."""
    own = cfg.root / "site"
    return own if (own / "templates").is_dir() else PACKAGE_SITE


def environment(templates: Path) -> Environment:
    """Jinja2 with autoescape on for everything: claim text is data, never markup."""
    env = Environment(loader=FileSystemLoader(templates), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["value"] = fmt_value
    env.filters["short"] = lambda sha: str(sha or "")[:12]
    env.globals.update(STATUSES=STATUSES, GENERATIONS=GENERATIONS, PHASES=PHASES, LABELS=LABELS,
                       claim_href=lambda cid: f"claims/{cid}.html", has_teaching=False)
    return env


def _filter_href(**params: str) -> str:
    """A link into the claim list with filters preset in the fragment (read by claims.js)."""
    return "claims.html#" + urlencode(params)


class _Writer:
    """Writes the new site into `new`; a file the old site `old` already holds as it is becomes a link to it
    (a re-export rewrites only what changed, and keeps mtimes)."""

    def __init__(self, new: Path, old: Path) -> None:
        self.new, self.old = new, old

    def write(self, rel: str, text: str) -> None:
        data = text.encode("utf-8")
        target, before = self.new / rel, self.old / rel
        try:
            if before.stat().st_size == len(data) and before.read_bytes() == data:
                os.link(before, target)
                return
        except OSError:
            pass
        target.write_bytes(data)

    def render(self, tpl: Template, rel: str, **ctx: Any) -> None:
        self.write(rel, tpl.render(**ctx))


def _benchmarks(data: SiteData) -> list[tuple[str, Any]]:
    """One inline chart per hardware class: the TFLOP/s of each benchmark figure (kb.export.site.measurements),
    its newest batch's p20-p80 spread, the band its check expects and the registered peak, coloured by the
    claim's verdict on that hardware."""
    charts = []
    per_class: dict[str, list[Bar]] = {}
    peaks: dict[str, float] = {}
    for r in measurement_rows(data):
        tf = r["value"] if r["verifier"] == "gpu.benchmark" and r["figure"] == "tflops" else None
        if not isinstance(tf, int | float) or isinstance(tf, bool):
            continue  # a null or non-numeric value: no bar, never a crash
        c = data.by_id[r["claim"]]
        p = c["checks"][r["check"]].get("params") or {}
        shape = "×".join(str(p.get(k, d)) for k, d in (("batch", 2), ("heads", 16), ("seqlen_q", 1024), ("head_dim", 128)))
        label = f"{r['implementation']} · {r['mode'].replace('forward', 'fwd').replace('backward', 'bwd')} · {shape}"
        spread = (r["p20"], r["p80"]) if r["p20"] is not None else None
        text = f"{tf:g} TFLOP/s" + (f", p20–p80 {spread[0]:.0f}–{spread[1]:.0f}" if spread else "") + f" · {r['status']}"
        per_class.setdefault(r["hardware"], []).append(Bar(label, float(tf), f"claims/{r['claim']}.html", spread=spread,
                                                           expected=r["band_range"], text=text, status=r["status"]))
        # The peak drawn is the registered hardware constant (sources/hardware.yaml) the GPU's name matches.
        for sid, src in data.sources.items():
            peak = (src.get("constants") or {}).get("peak_bf16_dense_tflops")
            if src.get("kind") == "hardware" and peak and f" {sid} " in f" {r['hardware']} ":
                peaks[r["hardware"]] = float(peak)
    for hw, rows in sorted(per_class.items()):
        ref = ("dense bf16 peak", peaks[hw]) if hw in peaks else None
        charts.append((hw, value_bars(sorted(rows, key=lambda b: -b.value), "TFLOP/s", f"Measured TFLOP/s on {hw}", ref)))
    return charts


def render_measurements(data: SiteData, env: Environment) -> tuple[str, str]:
    """measurements.html and measurements.csv (written into the site, so swapped in with it, whole or not at all)."""
    ctx = measurements_context(data)
    return env.get_template("measurements.html").render(root="", page="measurements.html", **ctx), to_csv(ctx["rows"])


def _dashboard_context(data: SiteData) -> dict[str, Any]:
    gens = count_by(data.claims, "generation", GENERATIONS)
    labels = count_by(data.claims, "label", LABELS)
    strengths = count_by(data.claims, "generation", GENERATIONS, of="strength")
    overall = {s: sum(1 for c in data.claims if c["overall"]["status"] == s) for s in STATUSES}
    return {
        "total": len(data.claims), "n_sources": len(data.sources), "n_runs": data.n_runs,
        "classes": data.classes, "overall": overall, "by_generation": gens, "by_label": labels,
        "gen_chart": stacked_bars(gens, STATUSES, lambda g, s: _filter_href(generation=g, status=s),
                                  "Claims per generation by status"),
        "label_chart": stacked_bars(labels, STATUSES, lambda g, s: _filter_href(label=g, status=s),
                                    "Claims per label by status"),
        "grades": STRENGTHS, "by_strength": strengths,
        "strength_chart": stacked_bars(strengths, STRENGTHS, lambda g, s: _filter_href(generation=g, strength=s),
                                       "Claims per generation by evidence strength"),
        "hardware": hardware_summary(data), "pending": pending_hardware(data.claims),
        "benchmarks": _benchmarks(data), "disagreements": disagreements(data.claims),
        "filter_href": _filter_href,
    }


def _graph_context(graph: Graph) -> dict[str, Any]:
    """One layered graph per note (claims with relations, grouped in columns by note section)."""
    notes = sorted({d["note"] for d in graph.nodes.values() if d.get("note")})
    views = []
    for note in notes:
        sub = by_note(graph, note)
        if sub.edges:
            views.append((note, len(sub.nodes), len(sub.edges),
                          linked_svg(to_svg(sub, href=lambda cid: f"claims/{cid}.html", group_by="section",
                                            title=f"relations among the claims of {note}"))))
    counts = {r: sum(1 for e in graph.edges if e[2] == r) for r in RELATIONS}
    return {"views": views, "counts": counts, "n_linked": len({n for a, b, _ in graph.edges for n in (a, b)})}


def linked_svg(svg: Markup) -> Markup:
    """A drawing whose nodes are links is a group of links, not one image (`role="img"` hides them from
    assistive technology, and axe reports links nested in an image). kb.export.graph draws it as an image."""
    text = str(svg)
    if "<a href" in text:
        text = text.replace(' role="img" ', ' role="group" ', 1)
    return Markup(text)


# Relations shown at the top of a claim page, as a correction reads: who replaces it, whom it contradicts.
CORRECTIONS = ("superseded by", "supersedes", "disagrees with", "disagreed with by")


def _claim_context(c: dict[str, Any], data: SiteData, outline: Outline,
                   published: dict[tuple[str, str], str | None]) -> dict[str, Any]:
    corrections = [(how, {"id": other, "c": data.by_id.get(other)})
                   for rel in CORRECTIONS for how, other, _ in c["related"] if how == rel]
    checks = [{**ch, "expect_text": fmt_expect(ch.get("expect", {})),
               "params_text": json.dumps(ch.get("params", {}), sort_keys=True),
               "constants": constants_named(ch.get("params", {}), data.sources)} for ch in c.get("checks", [])]
    scope = [(k, v) for k, v in (c.get("scope") or {}).items() if v]
    return {"c": c, "anchors": [anchor_view(a, data.sources, published) for a in c.get("anchors", [])],
            "checks": checks, "corrections": corrections, "locations": claim_locations(c, data, outline),
            "upstream": upstream_notice(c, data.sources), "scope": scope,
            "runs": _dedupe_kernels([run_view(r) for r in c["runs"]]), "filter_href": _filter_href,
            "charts": gpu_charts(c, data.sources)}


def _dedupe_kernels(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Show a kernel list once per claim page: later runs with the same list point at the first that had it."""
    first: dict[tuple[str, ...], str] = {}
    for r in runs:
        key = tuple(r["kernels"])
        r["kernels_same_as"] = None
        if key and key in first:
            r["kernels_same_as"] = first[key]
        elif key:
            first[key] = r.get("run_id", "")
    return runs


def _sources_context(data: SiteData) -> dict[str, Any]:
    groups = []
    for kind in SOURCE_KINDS:
        items = [{**s, "links": source_links(s), "cited": data.cited.get(sid, 0),
                  "constants_used": data.constants_used.get(sid, 0)}
                 for sid, s in sorted(data.sources.items()) if s.get("kind") == kind]
        if items:
            groups.append((kind, items))
    return {"groups": groups, "filter_href": _filter_href}


def _copy_static(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copyfile(f, dest / f.name)


def _write_index(data: SiteData, out: _Writer) -> None:
    text = json.dumps(index_json(data), separators=(",", ":"), ensure_ascii=True)
    out.write("claims.json", text + "\n")
    # '<' escaped so the index can never close a script element, whatever a statement says.
    out.write("claims-index.js", "window.KB_CLAIMS = " + text.replace("<", "\\u003c") + ";\n")


def read_previous(previous: str | None) -> tuple[str | None, str | None]:
    """The text of an earlier export's claims.json named by `--previous`: (text, note).

    An https:// URL is fetched (CI passes the published site's); when it cannot be reached the text is
    None and the note says why, so the build goes on. A file that cannot be read raises OSError.
    """
    if not previous:
        return None, None
    if previous.startswith("https://"):
        from kb.http import FetchError, HttpClient

        try:
            # kb's one client (retries, gzip); nothing cached: the published index changes with every push.
            return HttpClient(None).get(previous, keep=False).text(), None
        except FetchError as exc:
            return None, f"previous export not reachable ({exc})"
    return Path(previous).read_text(encoding="utf-8"), None


def changes_since(out: Path, data: SiteData, previous: str | None = None) -> dict[str, Any] | None:
    """What changed since the previous export: new, removed, status moves.

    The previous export is the claims.json text handed in (`kb export site --previous`, e.g. the
    published site's, fetched by CI), else the one already in `out`. None when there is none.
    """
    try:
        prev = json.loads(previous if previous is not None else (out / "claims.json").read_text(encoding="utf-8"))
        before = {c["id"]: c["status"] for c in prev.get("claims", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    now = {c["id"]: c["overall"]["status"] for c in data.claims}
    moved = sorted((cid, before[cid], st) for cid, st in now.items() if cid in before and before[cid] != st)
    return {"added": sorted(set(now) - set(before)), "removed": sorted(set(before) - set(now)), "moved": moved}


def _carry_over(old: Path, new: Path) -> None:
    """Files of the old site the new build did not write stay (as when the site was written in place),
    except claim pages: a claims/*.html not written now is a page whose claim is gone."""
    if not old.is_dir():
        return
    for folder, _, files in os.walk(old):
        rel = Path(folder).relative_to(old)
        for name in files:
            src, target = Path(folder) / name, new / rel / name
            # Claim, note and deck pages not written now belong to a claim, note or deck that is gone.
            if (str(rel) in ("claims", "notes", "decks") and name.endswith(".html")) or target.exists() \
                    or target.is_symlink():
                continue
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                if src.is_symlink():
                    os.symlink(os.readlink(src), target)
                else:
                    os.link(src, target)
            except (FileExistsError, NotADirectoryError):
                continue  # the new build has a file where the old one had a folder, or the reverse
            except OSError:
                shutil.copy2(src, target, follow_symlinks=False)


def corpus_revision(root: Path) -> dict[str, Any] | None:
    """The commit the claim files were exported from (its date, and whether the tree had edits), if a git checkout.

    The commit's own date, not the clock: two exports of one commit stay byte-identical.
    """
    import subprocess

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    head = git("log", "-1", "--format=%H %cI")
    if not head:
        return None
    sha, _, date = head.partition(" ")
    dirty = bool(git("status", "--porcelain", "--", "claims", "sources", "evidence"))
    return {"sha": sha, "date": date[:10], "dirty": dirty}


def build_site(db: sqlite_utils.Database, cfg: Config, out: Path, previous: str | None = None) -> int:
    """Write the static site for the index `db` into `out`; return the number of HTML pages written.

    `previous` is the text of an earlier export's claims.json to compare with (default: the one in `out`).
    The site is built beside `out` and replaces it whole at the end (kb.fsutil.OutputError on failure,
    `out` left as it was).
    """
    data = load_site(db)
    outline = notes_outline(cfg, data)
    base = site_dir(cfg)
    env = environment(base / "templates")
    with replaced_dir(out) as new:
        n = _build(db, cfg, data, outline, env, base, _Writer(new, out), changes_since(out, data, previous))
        _carry_over(out, new)
    return n


def notes_outline(cfg: Config, data: SiteData) -> Outline:
    """The headings and slides of the notes source at its pin (kb.export.site.outline), for the reader pages."""
    src = next((s for s in data.sources.values() if s.get("kind") == "notes"), {})
    anchors = [a for c in data.claims for a in c.get("anchors", []) if a.get("source") == src.get("id")]
    return read_outline(cfg, src, anchors)


def _reader_pages(db: sqlite_utils.Database, data: SiteData, outline: Outline, env: Environment,
                  out: _Writer) -> tuple[int, dict[str, Any]]:
    """The notes index, a page per note and per deck, errata and the glossary; (pages written, errata data)."""
    src = next((s for s in data.sources.values() if s.get("kind") == "notes"), {})
    notes, decks = note_pages(data, outline), deck_pages(data, outline)
    common = {"outline": outline, "commit": src.get("commit", ""), "filter_href": _filter_href}
    (out.new / "notes").mkdir()
    (out.new / "decks").mkdir()
    out.render(env.get_template("notes.html"), "notes.html", root="", page="notes.html", notes=notes, decks=decks,
               repo=(src.get("repo") or "").removeprefix("https://github.com/"), repo_url=safe_url(src.get("repo")),
               **common)
    note_tpl, deck_tpl = env.get_template("note.html"), env.get_template("deck.html")
    for note in notes:
        out.render(note_tpl, note["href"], root="../", page="notes.html", note=note, **common)
    for deck in decks:
        out.render(deck_tpl, deck["href"], root="../", page="notes.html", deck=deck, **common)
    errata = errata_page(collect_errata(db), data, outline)
    out.render(env.get_template("errata.html"), "errata.html", root="", page="errata.html", e=errata, **common)
    out.render(env.get_template("glossary.html"), "glossary.html", root="", page="glossary.html", groups=glossary())
    return 3 + len(notes) + len(decks), errata


def _build(db: sqlite_utils.Database, cfg: Config, data: SiteData, outline: Outline, env: Environment, base: Path,
           out: _Writer, changes: dict[str, Any] | None) -> int:
    (out.new / "claims").mkdir()
    # The nav links the learner pages only when there are any (write_teaching writes none without teach.* claims).
    env.globals["has_teaching"] = bool(teaching_sources(data))
    _copy_static(base / "static", out.new / "static")
    out.write(".nojekyll", "")
    _write_index(data, out)

    n_readers, errata = _reader_pages(db, data, outline, env, out)
    topics = sorted({t for c in data.claims for t in c["topics"]}, key=lambda t: TOPICS.index(t) if t in TOPICS else 999)
    list_ctx = {"total": len(data.claims), "facets": facets(data, topics), "page_size": PAGE_SIZE}
    pages = {
        "index.html": ("index.html", {**_dashboard_context(data), "changes": changes, "errata": errata,
                                      "revision": corpus_revision(cfg.root)}),
        "claims.html": ("claims.html", {**list_ctx, "claims": data.claims[:PAGE_SIZE], "full": False}),
        "claims-all.html": ("claims.html", {**list_ctx, "claims": data.claims, "full": True}),
        "matrix.html": ("matrix.html", {"claims": [c for c in data.claims if c.get("checks")], "classes": data.classes}),
        "generations.html": ("generations.html", {"gens": generation_view(data.claims, data.sources),
                                                  "filter_href": _filter_href}),
        "sources.html": ("sources.html", _sources_context(data)),
    }
    html, table = render_measurements(data, env)
    out.write("measurements.html", html)
    out.write("measurements.csv", table)
    graph = load_graph(db)
    pages["graph.html"] = ("graph.html", _graph_context(graph))
    for name, (tpl_name, ctx) in pages.items():
        out.render(env.get_template(tpl_name), name, root="", page=name, **ctx)
    matrix_sel.write(data, env, out)  # kernels.html + kernels.csv (kb/export/site/matrix_sel.py)

    claim_tpl = env.get_template("claim.html")
    published = outline.published()
    keep = set()
    linked = {n for a, b, _ in graph.edges for n in (a, b)}
    for c in data.claims:
        name = f"{c['id']}.html"
        keep.add(name)
        hood = None
        if c["id"] in linked:
            sub = neighbourhood(graph, c["id"], 2)
            hood = linked_svg(to_svg(sub, href=lambda cid: f"{cid}.html", title=f"claims related to {c['id']}",
                                     highlight=c["id"]))
        out.render(claim_tpl, f"claims/{name}", root="../", page="claim", graph=hood, **_claim_context(c, data, outline, published))
    # + measurements.html, + the learner pages (kb/export/site/teaching.py)
    return len(pages) + len(keep) + n_readers + 1 + write_teaching(env, data, out)
