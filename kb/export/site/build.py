"""The static site: a pure function of the index, written as plain files.

Layout of the output folder (every link relative, so it works from file://
and from GitHub Pages, and nothing is fetched from another host):

    index.html          dashboard: counts, status by generation and label, hardware summary
    claims.html         the claim list: its first page server-rendered; claims.js filters, sorts and pages it
                        from the index below, so 10,000 claims never become 10,000 table rows
    claims-all.html     every claim on one page, no script needed (what claims.html links to without JavaScript)
    claims.json         the filter index (one small record per claim)
    claims-index.js     the same index as a script, for file:// where fetch() of a file is refused
    claims/<id>.html    one page per claim
    matrix.html         claims x hardware class
    generations.html    FA1 -> FA4 (and the other groupings)
    sources.html        every source and its pins
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

from kb.config import Config
from kb.export.graph import RELATIONS, Graph, by_note, load_graph, neighbourhood, to_svg
from kb.export.site.charts import _scalar as scalar_of
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
    source_links,
)
from kb.export.site.svg import Bar, stacked_bars, value_bars
from kb.export.site.teaching import write_teaching
from kb.fsutil import replaced_dir
from kb.records.vocab import GENERATIONS, LABELS, PHASES, STATUSES, TOPICS

PACKAGE_SITE = Path(__file__).resolve().parents[3] / "site"

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
                       claim_href=lambda cid: f"claims/{cid}.html")
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
    """One inline chart per hardware class: the latest TFLOP/s of each throughput claim, against the peak."""
    charts = []
    per_class: dict[str, list[Bar]] = {}
    peaks: dict[str, float] = {}
    for c in data.claims:
        seen: set[str] = set()
        for r in c["runs"]:  # newest first
            tf = scalar_of(r, "tflops")  # None for a null or non-numeric value: no bar, never a crash
            if r.get("verifier") != "gpu.benchmark" or tf is None or r["hardware_class"] in seen:
                continue
            seen.add(r["hardware_class"])
            impl = (r.get("params") or {}).get("impl", "sdpa-flash")
            per_class.setdefault(r["hardware_class"], []).append(Bar(f"{impl} · {c['id']}", tf,
                                                                     f"claims/{c['id']}.html"))
            # The peak drawn is the registered hardware constant (sources/hardware.yaml) the GPU's name matches.
            for sid, src in data.sources.items():
                peak = (src.get("constants") or {}).get("peak_bf16_dense_tflops")
                if src.get("kind") == "hardware" and peak and f" {sid} " in f" {r['hardware_class']} ":
                    peaks[r["hardware_class"]] = float(peak)
    for hw, rows in sorted(per_class.items()):
        ref = ("dense bf16 peak", peaks[hw]) if hw in peaks else None
        charts.append((hw, value_bars(sorted(rows, key=lambda b: -b.value), "TFLOP/s", f"Measured TFLOP/s on {hw}", ref)))
    return charts


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


def _claim_context(c: dict[str, Any], data: SiteData) -> dict[str, Any]:
    checks = [{**ch, "expect_text": fmt_expect(ch.get("expect", {})),
               "params_text": json.dumps(ch.get("params", {}), sort_keys=True),
               "constants": constants_named(ch.get("params", {}), data.sources)} for ch in c.get("checks", [])]
    scope = [(k, v) for k, v in (c.get("scope") or {}).items() if v]
    return {"c": c, "anchors": [anchor_view(a, data.sources) for a in c.get("anchors", [])], "checks": checks,
            "scope": scope, "runs": _dedupe_kernels([run_view(r) for r in c["runs"]]), "filter_href": _filter_href,
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
        import requests

        try:
            resp = requests.get(previous, timeout=20)
            resp.raise_for_status()
        except requests.RequestException as exc:
            return None, f"previous export not reachable ({exc})"
        return resp.text, None
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
            if (rel == Path("claims") and name.endswith(".html")) or target.exists() or target.is_symlink():
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
    base = site_dir(cfg)
    env = environment(base / "templates")
    with replaced_dir(out) as new:
        n = _build(db, cfg, data, env, base, _Writer(new, out), changes_since(out, data, previous))
        _carry_over(out, new)
    return n


def _build(db: sqlite_utils.Database, cfg: Config, data: SiteData, env: Environment, base: Path, out: _Writer,
           changes: dict[str, Any] | None) -> int:
    (out.new / "claims").mkdir()
    _copy_static(base / "static", out.new / "static")
    out.write(".nojekyll", "")
    _write_index(data, out)

    topics = sorted({t for c in data.claims for t in c["topics"]}, key=lambda t: TOPICS.index(t) if t in TOPICS else 999)
    list_ctx = {"total": len(data.claims), "facets": facets(data, topics), "page_size": PAGE_SIZE}
    pages = {
        "index.html": ("index.html", {**_dashboard_context(data), "changes": changes,
                                      "revision": corpus_revision(cfg.root)}),
        "claims.html": ("claims.html", {**list_ctx, "claims": data.claims[:PAGE_SIZE], "full": False}),
        "claims-all.html": ("claims.html", {**list_ctx, "claims": data.claims, "full": True}),
        "matrix.html": ("matrix.html", {"claims": [c for c in data.claims if c.get("checks")], "classes": data.classes}),
        "generations.html": ("generations.html", {"gens": generation_view(data.claims, data.sources),
                                                  "filter_href": _filter_href}),
        "sources.html": ("sources.html", _sources_context(data)),
    }
    graph = load_graph(db)
    pages["graph.html"] = ("graph.html", _graph_context(graph))
    for name, (tpl_name, ctx) in pages.items():
        out.render(env.get_template(tpl_name), name, root="", page=name, **ctx)

    claim_tpl = env.get_template("claim.html")
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
        out.render(claim_tpl, f"claims/{name}", root="../", page="claim", graph=hood, **_claim_context(c, data))
    return len(pages) + len(keep) + write_teaching(env, data, out)  # the learner pages (kb/export/site/teaching.py)
