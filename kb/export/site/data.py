"""What the static site shows, read from the index in a few bulk queries.

Pages never query the database: `load_site` reads claims, statuses, runs and
sources once and groups them in memory, so 10,000 claims cost four queries,
not tens of thousands. Links built from data go through `safe_url`: only an
https:// URL (or a relative link built here) ever becomes an href.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import sqlite_utils

from kb.index.rests import RESTS
from kb.records.vocab import GENERATIONS, LABELS, PHASES, STATUSES

OVERALL = "*"
# (field on the claim, how the relation reads from the other end)
RELATIONS = (("depends_on", "depended on by"), ("refines", "refined by"), ("supersedes", "superseded by"),
             ("disagrees_with", "disagreed with by"))
LOCATORS = ("section", "figure", "table", "equation", "algorithm")
SOURCE_KINDS = ("notes", "paper", "repo", "web", "hardware", "private")
_UNSAFE_URL_CHARS = frozenset(" \"'<>`\\\n\r\t")


@dataclass
class SiteData:
    """Every claim (with statuses, runs and relations attached) and every source."""

    claims: list[dict[str, Any]]
    by_id: dict[str, dict[str, Any]]
    sources: dict[str, dict[str, Any]]
    classes: list[str]
    n_runs: int
    cited: Counter[str]
    # Hardware sheets are not cited by anchors but read by checks (`H100.sm_count`): claims per sheet.
    constants_used: Counter[str] = field(default_factory=Counter)


def load_site(db: sqlite_utils.Database) -> SiteData:
    """Read the whole index; attach to each claim its statuses, runs, sources and relations."""
    sources = {r["id"]: json.loads(r["json"]) for r in db.query("SELECT id, json FROM sources ORDER BY id")}
    status: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in db.query("SELECT claim_id, hardware_class, status, reason, run_ids, strength, upstream, rests_on, rests_via, "
                      "cause, cause_why, cause_by, grade_note, grade_note_why FROM status"):
        status[r["claim_id"]][r["hardware_class"]] = {
            "status": r["status"], "reason": r["reason"] or "", "run_ids": json.loads(r["run_ids"] or "[]"),
            "strength": r["strength"] or "none", "upstream": r["upstream"], "rests_on": r["rests_on"],
            "rests_via": r["rests_via"], "cause": r["cause"], "cause_why": r["cause_why"], "cause_by": r["cause_by"],
            "grade_note": r["grade_note"], "grade_note_why": r["grade_note_why"],
        }
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    n_runs = 0
    for r in db.query("SELECT claim_id, json FROM runs ORDER BY started DESC, run_id"):
        runs[r["claim_id"]].append(json.loads(r["json"]))
        n_runs += 1
    claims: list[dict[str, Any]] = []
    classes: set[str] = set()
    cited: Counter[str] = Counter()
    for r in db.query("SELECT id, file, line, content_hash, json FROM claims ORDER BY id"):
        c = json.loads(r["json"])
        c["file"], c["line"], c["content_hash"] = r["file"], r["line"], r["content_hash"]
        st = status.get(c["id"], {})
        c["overall"] = st.get(OVERALL) or {"status": "unverified", "reason": "no status derived", "run_ids": [],
                                           "strength": "none"}
        c["classes"] = {hw: s for hw, s in sorted(st.items()) if hw != OVERALL}
        classes.update(c["classes"])
        c["runs"] = runs.get(c["id"], [])
        c["sources"] = sorted({a["source"] for a in c.get("anchors", [])})
        cited.update(c["sources"])
        claims.append(c)
    by_id = {c["id"]: c for c in claims}
    _attach_relations(claims, by_id)
    return SiteData(claims, by_id, sources, sorted(classes), n_runs, cited, _constants_used(claims, sources))


def constants_named(params: dict[str, Any], sources: dict[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    """The hardware constants a check's parameters name, with the values the check read (`H100.sm_count` = 132)."""
    text = json.dumps(params)
    out = []
    for sid, name in sorted(set(re.findall(r"\b([A-Za-z][\w-]*)\.([A-Za-z_]\w*)", text))):
        src = sources.get(sid) or {}
        if src.get("kind") == "hardware" and name in (src.get("constants") or {}):
            out.append((f"{sid}.{name}", src["constants"][name]))
    return out


def _constants_used(claims: list[dict[str, Any]], sources: dict[str, dict[str, Any]]) -> Counter[str]:
    """Per hardware sheet, how many claims have a check whose parameters name one of its constants."""
    used: Counter[str] = Counter()
    for c in claims:
        named = (constants_named(ch.get("params", {}), sources) for ch in c.get("checks", []))
        used.update({name.partition(".")[0] for consts in named for name, _ in consts})
    return used


def _attach_relations(claims: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> None:
    """`related`: (how, other id, exists) both ways, so a page shows who points at it too."""
    for c in claims:
        c["related"] = []
    for c in claims:
        for rel, inverse in RELATIONS:
            for other in c.get(rel, []):
                c["related"].append((rel.replace("_", " "), other, other in by_id))
                if other in by_id:
                    by_id[other]["related"].append((inverse, c["id"], True))


def disagreements(claims: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of claims stating one fact differently (a deck against its note), each pair once, both sides."""
    by_id = {c["id"]: c for c in claims}
    pairs = {tuple(sorted((c["id"], other))) for c in claims for other in c.get("disagrees_with", []) if other in by_id}
    return [(by_id[a], by_id[b]) for a, b in sorted(pairs)]


def safe_url(url: Any) -> str | None:
    """The URL if it is a plain https:// URL, else None: data never becomes a javascript: href."""
    if isinstance(url, str) and url.startswith("https://") and not (_UNSAFE_URL_CHARS & set(url)):
        return url
    return None


def _lines_fragment(lines: list[int] | None) -> str:
    return f"#L{lines[0]}-L{lines[1]}" if lines else ""


def slide_url(src: dict[str, Any], path: str, number: int) -> str | None:
    """A deck's slide on the notes' published site (`<site>/slides/<deck>.html#N`), or None without a site."""
    base = safe_url(src.get("site"))
    if not base or not path.startswith("docs/"):
        return None
    return f"{base.rstrip('/')}/{quote(path.removeprefix('docs/'))}#{int(number)}"


def note_urls(src: dict[str, Any], path: str, slug: str | None = None,
              published: str | None = None) -> tuple[str | None, str | None]:
    """(GitHub at the pinned commit, the notes' published site) links to a note or one of its sections.

    `published` is the note's or the section's id on the published notes.html (kb.export.site.outline);
    without it (unknown, or not on the published page) there is no site link.
    """
    commit = src.get("commit", "")
    github = None
    if base := safe_url(src.get("repo")):
        github = f"{base.rstrip('/')}/blob/{commit}/{quote(path)}" + (f"#{quote(slug, safe='-_')}" if slug else "")
    site = None
    if (root := safe_url(src.get("site"))) and published:
        site = f"{root.rstrip('/')}/notes.html#{quote(published, safe='-_')}"
    return github, site


def anchor_view(anchor: dict[str, Any], sources: dict[str, dict[str, Any]],
                published: dict[tuple[str, str], str | None] | None = None) -> dict[str, Any]:
    """One provenance link: the permalink (or None), its text, further links and the details around it.

    `published` maps (note path, heading slug) to the heading's id on the notes' published site.
    """
    src = sources.get(anchor["source"], {})
    kind = src.get("kind", "?")
    view: dict[str, Any] = {"source": anchor["source"], "title": src.get("title"), "kind": kind,
                            "url": None, "text": anchor["source"], "details": [], "links": []}
    path = anchor.get("path") or ""
    if kind == "notes" and anchor.get("slide"):
        # A slide of a deck: the deck itself opened at the slide (the decks take #N), and its source at the pin.
        commit, number = src.get("commit", ""), int(anchor["slide"])
        view["url"] = slide_url(src, path, number)
        if base := safe_url(src.get("repo")):
            source = f"{base.rstrip('/')}/blob/{commit}/{quote(path)}"
            if view["url"] is None:
                view["url"] = source
            else:
                view["links"].append(("deck source at the pin", source))
        view["text"] = f"{path} slide {number}"
        view["details"].append(f"slide deck at commit {commit[:12]}; slide text sha256 {str(anchor.get('sha256'))[:12]}")
    elif kind == "notes":
        heading = anchor.get("heading") or ""
        github, site = note_urls(src, path, heading, (published or {}).get((path, heading)))
        view["url"] = github
        if site:
            view["links"].append(("on the notes' site", site))
        view["text"] = f"{path} § {heading}"
        view["details"].append(f"notes at commit {src.get('commit', '')[:12]}")
    elif kind == "repo":
        sha, lines = anchor.get("sha") or "", anchor.get("lines")
        if base := safe_url(src.get("url")):
            view["url"] = f"{base.rstrip('/').removesuffix('.git')}/blob/{sha}/{quote(path)}{_lines_fragment(lines)}"
        view["text"] = path + (f" lines {lines[0]}–{lines[1]}" if lines else "")
        pin = next((name for name, s in src.get("pins", {}).items() if s == sha), None)
        view["details"].append(f"pin {pin} = {sha[:12]}" if pin else f"commit {sha[:12]}")
    elif kind == "paper" and src.get("arxiv"):
        version = src.get("version")
        view["url"] = f"https://arxiv.org/abs/{quote(str(src['arxiv']), safe='./')}" + (f"v{int(version)}" if version else "")
        view["text"] = f"arXiv:{src['arxiv']}" + (f"v{version}" if version else "")
    elif kind == "web":
        view["url"] = safe_url(src.get("url"))
        view["text"] = src.get("title") or anchor["source"]
        if view["url"] is None:
            view["details"].append("its URL is not an https:// URL, so it is not linked")
        if src.get("retrieved"):
            view["details"].append(f"retrieved {src['retrieved']}")
        if src.get("why_unhashed"):
            view["details"].append(f"no content hash: {src['why_unhashed']}")
    elif kind == "private":
        view["details"].append(f"not publicly checkable: {src.get('why_uncheckable', '')}")
    view["locator"] = ", ".join(f"{k} {anchor[k]}" for k in LOCATORS if anchor.get(k))
    for key, label in (("symbol", "symbol"), ("note", "note")):
        if anchor.get(key):
            view["details"].append(f"{label}: {anchor[key]}")
    if anchor.get("sha256"):
        view["details"].append(f"sha256 {anchor['sha256'][:16]}…")
    return view


def source_links(src: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(text, https url or None) lines describing where a source lives and what is pinned."""
    kind = src.get("kind")
    if kind == "paper":
        v = src.get("version")
        url = f"https://arxiv.org/abs/{quote(str(src.get('arxiv', '')), safe='./')}" + (f"v{int(v)}" if v else "")
        return [(f"arXiv:{src.get('arxiv')}v{v}" + (f" ({src['year']})" if src.get("year") else ""), url)]
    if kind == "repo":
        base = safe_url(src.get("url"))
        out = [(src.get("url", ""), base)]
        root = base.rstrip("/").removesuffix(".git") if base else None
        for name, sha in src.get("pins", {}).items():
            out.append((f"pin {name} = {sha}", f"{root}/tree/{sha}" if root else None))
        return out
    if kind == "notes":
        base = safe_url(src.get("repo"))
        commit = src.get("commit", "")
        return [(src.get("repo", ""), base),
                (f"commit {commit}", f"{base.rstrip('/')}/tree/{commit}" if base else None)]
    if kind == "web":
        return [(src.get("url", ""), safe_url(src.get("url")))] + (
            [(f"retrieved {src['retrieved']}", None)] if src.get("retrieved") else []) + (
            [(f"no content hash: {src['why_unhashed']}", None)] if src.get("why_unhashed") else [])
    if kind == "private":
        return [(f"not publicly checkable: {src.get('why_uncheckable', '')}", None)]
    return []


def fmt_value(value: Any, limit: int = 200) -> str:
    """A measured or parameter value as short text."""
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_expect(expect: dict[str, Any]) -> list[str]:
    """An expectation as readable rules: 'distinct_o = 1', 'ratio ≈ 2 (rel 0.1)'."""
    out = []
    for name, rule in expect.items():
        parts = []
        if rule.get("equals") is not None:
            parts.append(f"= {fmt_value(rule['equals'])}")
        if rule.get("approx") is not None:
            tol = ", ".join(f"{k} {rule[k]}" for k in ("rel", "abs") if rule.get(k) is not None)
            parts.append(f"≈ {fmt_value(rule['approx'])}" + (f" ({tol})" if tol else ""))
        if rule.get("at_most") is not None:
            parts.append(f"≤ {fmt_value(rule['at_most'])}")
        if rule.get("at_least") is not None:
            parts.append(f"≥ {fmt_value(rule['at_least'])}")
        if rule.get("between") is not None:
            lo, hi = rule["between"]
            parts.append(f"in [{fmt_value(lo)}, {fmt_value(hi)}]")
        if rule.get("is") is not None:
            parts.append(f"is {str(rule['is']).lower()}")
        out.append(f"{name} {' and '.join(parts)}")
    return out


def run_view(run: dict[str, Any]) -> dict[str, Any]:
    """A run record with the environment facts a reader looks for pulled out."""
    env = run.get("environment") or {}
    gpu = (env.get("gpu") or {}).get("name") if isinstance(env.get("gpu"), dict) else None
    gpu = gpu or next((g.get("name") for g in env.get("gpus") or [] if isinstance(g, dict)), None)
    torch_version = env.get("torch") or (env.get("packages") or {}).get("torch")
    return {
        **run,
        "started_text": str(run.get("started", "")).replace("T", " ").replace("+00:00", " UTC"),
        "gpu": gpu,
        "torch": torch_version,
        "kernels": [str(k) for k in env.get("kernels") or []],
        "host": env.get("host"),
        "cuda": env.get("cuda") or env.get("torch_cuda"),
        "measurements_text": [(k, fmt_value(m.get("value")), m.get("unit", "")) for k, m in run.get("measurements", {}).items()],
    }


def count_by(claims: Iterable[dict[str, Any]], key: str, order: Iterable[str],
             of: str = "status") -> list[tuple[str, Counter[str]]]:
    """(value of `key`, counts of the overall `of` (status or strength)) for each value in `order` that has claims."""
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for c in claims:
        table[c[key]][c["overall"][of]] += 1
    return [(k, table[k]) for k in order if k in table]


def hardware_summary(data: SiteData) -> list[tuple[str, Counter[str]]]:
    """Per hardware class, how many claims have each status there; then what is still waiting for hardware."""
    rows: dict[str, Counter[str]] = {hw: Counter() for hw in data.classes}
    for c in data.claims:
        for hw, s in c["classes"].items():
            rows[hw][s["status"]] += 1
    return list(rows.items())


_FAMILIES = (("sm_80", "Ampere (sm_80, A100)"), ("sm_90", "Hopper (sm_90, H100/H200)"),
             ("sm_10", "Blackwell (sm_100, B200)"))


def _requirement(reason: str) -> str:
    """The requirement part of a needs-hardware reason, without the recipe that follows it."""
    text = reason.partition(" needs ")[2] or reason
    text = text.removeprefix("needs ").strip()
    return re.split(r":|;| to | for ", text, maxsplit=1)[0].strip() or text


def _family(requirement: str) -> str:
    """The hardware a requirement asks for, as one group: one architecture, several, any GPU, or Rubin."""
    low = requirement.lower()
    if "rubin" in low:
        return "Rubin (not yet available)"
    arch = set(re.findall(r"sm_(\d+)", low))
    arch |= {"90"} if re.search(r"\bh[12]00\b", low) else set()
    arch |= {"100"} if "b200" in low else set()
    names = [name for prefix, name in _FAMILIES if any(f"sm_{a}".startswith(prefix) for a in arch)]
    if len(names) == 1:
        return names[0]
    if names:
        return "any of " + ", ".join(n.split(" (")[0] for n in names)
    return "any CUDA GPU"


def pending_hardware(claims: Iterable[dict[str, Any]]) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Claims waiting for hardware, grouped by the hardware they need, each with its distinct requirements."""
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    for c in claims:
        if c["overall"]["status"] == "needs-hardware":
            req = _requirement(c["overall"]["reason"])
            groups[_family(req)][req] += 1
    return sorted(((fam, sum(reqs.values()), reqs.most_common()) for fam, reqs in groups.items()),
                  key=lambda g: (-g[1], g[0]))


def generation_view(claims: list[dict[str, Any]], sources: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per generation: counts by status and label, main topics, the papers its claims cite."""
    out = []
    for gen in GENERATIONS:
        mine = [c for c in claims if c["generation"] == gen]
        if not mine:
            continue
        topics: Counter[str] = Counter(t for c in mine for t in c["topics"])
        cites: Counter[str] = Counter(s for c in mine for s in c["sources"] if sources.get(s, {}).get("kind") == "paper")
        out.append({
            "name": gen, "total": len(mine),
            "status": Counter(c["overall"]["status"] for c in mine),
            "labels": [(lab, n) for lab in LABELS if (n := sum(c["label"] == lab for c in mine))],
            "topics": topics.most_common(8),
            "papers": [(s, sources[s].get("title") or s, n) for s, n in cites.most_common(5)],
        })
    return out


ARCH_TOKEN = re.compile(r"\bsm_\d+[a-z]?\b|\b[ABHLR]\d{2,3}\b")


def arch_values(claims: Iterable[dict[str, Any]]) -> list[str]:
    """The architectures scopes name (sm_80, sm_90a, H200, ...): the arch filter's choices.

    Like `kb claims --arch`, choosing one matches every scope whose arch text contains it
    (case-insensitive), so sm_90 also finds 'sm_90a' and 'sm_80/sm_90'.
    """
    found = {t for c in claims for t in ARCH_TOKEN.findall(str((c.get("scope") or {}).get("arch") or ""))}
    return sorted(found, key=lambda t: (not t.startswith("sm_"), int(re.sub(r"\D", "", t) or 0), t))


def facets(data: SiteData, topics: list[str]) -> list[dict[str, Any]]:
    """The claim list's filters, each with its choices and how many claims each choice has (before filtering).

    The same filters as `kb claims` (generation, topic, phase, label, status, source, arch, rests-on,
    strength), plus the hardware class a status was found on. claims.js recounts them as filters combine.
    """
    cs = data.claims
    arch_text = [str((c.get("scope") or {}).get("arch") or "").lower() for c in cs]

    def tally(values: Iterable[str], of: Iterable[Iterable[str]]) -> list[tuple[str, int]]:
        counts: Counter[str] = Counter(v for vs in of for v in set(vs))
        return [(v, counts.get(v, 0)) for v in values]

    strengths = ("measured", "derived", "cited", "restated", "none")
    arch = arch_values(cs)
    return [
        {"name": "generation", "label": "Generation", "values": tally(GENERATIONS, ([c["generation"]] for c in cs))},
        {"name": "topic", "label": "Topic", "values": tally(topics, (c["topics"] for c in cs))},
        {"name": "phase", "label": "Phase", "values": tally(PHASES, ([c["phase"]] for c in cs))},
        {"name": "label", "label": "Label", "values": tally(LABELS, ([c["label"]] for c in cs))},
        {"name": "status", "label": "Status", "values": tally(STATUSES, ([c["overall"]["status"]] for c in cs))},
        {"name": "strength", "label": "Strength", "values": tally(strengths, ([c["overall"]["strength"]] for c in cs))},
        {"name": "rests_on", "label": "Rests on", "values": tally(RESTS, ([c["overall"].get("rests_on") or ""] for c in cs))},
        {"name": "arch", "label": "Architecture",
         "values": [(a, sum(a.lower() in t for t in arch_text)) for a in arch]},
        {"name": "hardware", "label": "Hardware", "values": tally(data.classes, (c["classes"] for c in cs))},
        {"name": "source", "label": "Source", "values": tally(sorted(data.sources), (c["sources"] for c in cs))},
    ]


def index_json(data: SiteData) -> dict[str, Any]:
    """The claim list's filter index (claims.json): one small record per claim."""
    def record(c: dict[str, Any]) -> dict[str, Any]:
        out = {
            "id": c["id"], "statement": c["statement"], "generation": c["generation"], "phase": c["phase"],
            "label": c["label"], "status": c["overall"]["status"], "strength": c["overall"]["strength"],
            "cause": c["overall"].get("cause"),
            "topics": c["topics"], "sources": c["sources"],
            "classes": {hw: s["status"] for hw, s in c["classes"].items()},
        }
        # The CLI's full-text search covers review reasons too; the page's search must find the same claims.
        if c.get("review"):
            out["review"] = c["review"]
        if arch := (c.get("scope") or {}).get("arch"):
            out["arch"] = str(arch)
        if c["overall"].get("rests_on"):
            out["rests_on"] = c["overall"]["rests_on"]
        return out

    return {"format": 1, "statuses": list(STATUSES), "generations": list(GENERATIONS),
            "strengths": ["measured", "derived", "cited", "restated", "none"], "claims": [record(c) for c in data.claims]}
