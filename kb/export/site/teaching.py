"""Learner pages for the teaching implementations: what holds, and where it breaks.

One page per pinned teaching repository (`teaching/<source id>.html`) and an index
(`teaching/index.html`). A repository's claims are the `teach.*` claims with a
repository anchor on it; each is shown under its derived status: verified (what
holds), refuted (where it breaks: the first failing input and the size of its
error, read from the latest run's measurements, and the recorded cause),
needing a GPU, or anything else. Nothing here is typed by hand: the page is a
view of the index, like every other page of the site.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import Environment

from kb.export.site.data import SiteData

PREFIX = "teach."
SECTIONS = (("refuted", "Where it breaks"), ("verified", "What holds"), ("needs-hardware", "Needs a GPU run"))


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _latest(c: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The newest run of the claim that measured `key` (runs are newest first)."""
    for r in c["runs"]:
        if key in r.get("measurements", {}):
            return r
    return None


def breaks_at(c: dict[str, Any]) -> str:
    """Where a claim's evidence says the implementation breaks: first failing input and error size, or why."""
    if (r := _latest(c, "first_failing")) is not None:
        f = r["measurements"]["first_failing"]["value"]
        n_bad = r["measurements"].get("failing_inputs", {}).get("value")
        n_all = r["measurements"].get("inputs", {}).get("value")
        where = ", ".join(f"{k}={_num(f[k])}" for k in ("n", "d", "causal", "tile") if k in f)
        size = (f"raised {f['raised']}" if "raised" in f else
                f"max abs error {_num(f.get('max_abs_err'))}, rel {_num(f.get('max_rel_err'))} in {f.get('tensor')}")
        return f"first failing input {where}: {size} ({n_bad} of {n_all} inputs fail)"
    if (r := _latest(c, "memory_exponent")) is not None:
        m = r["measurements"]
        peaks = m.get("peak_bytes", {}).get("value")
        return f"peak memory grows as N^{m['memory_exponent']['value']:.2f}" + (f" (peak bytes {peaks})" if peaks else "")
    if (r := _latest(c, "runs")) is not None and "error" in r["measurements"]:
        return f"the call fails: {r['measurements']['error']['value']}"
    return c["overall"].get("reason", "")


def holds_with(c: dict[str, Any]) -> str:
    """What the supporting evidence measured (the largest error over the grid, the memory exponent)."""
    if (r := _latest(c, "max_abs_err")) is not None:
        m = r["measurements"]
        return f"max abs error {_num(m['max_abs_err']['value'])} over {m.get('inputs', {}).get('value')} inputs"
    if (r := _latest(c, "memory_exponent")) is not None:
        return f"peak memory grows as N^{r['measurements']['memory_exponent']['value']:.2f}"
    return ""


def teaching_context(data: SiteData, source_id: str) -> dict[str, Any]:
    """The page data of one teaching repository."""
    mine = [c for c in data.claims if c["id"].startswith(PREFIX)
            and any(a.get("source") == source_id and a.get("sha") for a in c.get("anchors", []))]
    src = data.sources.get(source_id, {})
    listed = next((a.get("note") for c in mine for a in c.get("anchors", [])
                   if data.sources.get(a.get("source"), {}).get("kind") == "web" and a.get("note")), None)
    groups = []
    for status, title in SECTIONS:
        rows = [{"c": c, "detail": breaks_at(c) if status == "refuted" else holds_with(c) if status == "verified"
                 else c["overall"].get("reason", ""), "cause": c["overall"].get("cause_why") if status == "refuted" else None}
                for c in mine if c["overall"]["status"] == status]
        groups.append((title, rows))
    rest = [{"c": c, "detail": c["overall"].get("reason", ""), "cause": None}
            for c in mine if c["overall"]["status"] not in {s for s, _ in SECTIONS}]
    groups.append(("Not decided here", rest))
    return {"src": src, "source_id": source_id, "listed": listed, "groups": groups, "n": len(mine),
            "pins": sorted(src.get("pins", {}).items())}


def teaching_sources(data: SiteData) -> list[str]:
    """Repository sources that `teach.*` claims anchor into, in id order."""
    return sorted({a["source"] for c in data.claims if c["id"].startswith(PREFIX) for a in c.get("anchors", [])
                   if data.sources.get(a.get("source"), {}).get("kind") == "repo"})


def write_teaching(env: Environment, data: SiteData, out: Any) -> int:
    """Render teaching/<source>.html for each teaching repository and teaching/index.html; return the page count.

    `out` is the site writer (build._Writer: `.new`, the folder being built, and `.render`).
    """
    ids = teaching_sources(data)
    if not ids:
        return 0
    (out.new / "teaching").mkdir(exist_ok=True)
    render: Callable[..., None] = out.render
    tpl = env.get_template("teaching.html")
    pages = [teaching_context(data, sid) for sid in ids]
    for ctx in pages:
        render(tpl, f"teaching/{ctx['source_id']}.html", root="../", page="teaching", index=None, **ctx)
    render(tpl, "teaching/index.html", root="../", page="teaching", index=pages, src={}, source_id="", listed=None,
           groups=[], n=sum(p["n"] for p in pages), pins=[])
    return len(pages) + 1
