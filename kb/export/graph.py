"""The claim graph: nodes coloured by status, bordered by what they rest on, edges by relation.

`graph_data` selects a neighbourhood (a claim and N steps of relations either
way) or a group (the claims anchored in one note), `to_json` writes node-link
JSON that graph libraries load (networkx `node_link_graph(data, edges="edges")`),
`to_dot` writes Graphviz text, and `to_svg` lays the graph out here, at build
time, with no external tool: layers by dependency depth (a premise below what
rests on it), order within a layer by the barycentre of neighbours, one column
group per note section when asked. Every node links to its claim page.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils
from markupsafe import Markup, escape

RELATIONS = ("depends_on", "refines", "supersedes")


@dataclass
class Graph:
    """Nodes (claim records) and edges (source, target, relation): source uses or refines target."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)
    _adj: dict[str, set[str]] | None = None
    _out: dict[str, list[tuple[str, str, str]]] | None = None

    def outgoing(self) -> dict[str, list[tuple[str, str, str]]]:
        """Edges grouped by the claim they start from, in edge order, built once."""
        if self._out is None:
            out: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
            for e in self.edges:
                out[e[0]].append(e)
            self._out = out
        return self._out

    def adjacency(self) -> dict[str, set[str]]:
        """Neighbours either way, built once (a site renders a neighbourhood per claim)."""
        if self._adj is None:
            adj: dict[str, set[str]] = defaultdict(set)
            for a, b, _ in self.edges:
                adj[a].add(b)
                adj[b].add(a)
            self._adj = adj
        return self._adj


def load_graph(db: sqlite_utils.Database) -> Graph:
    """Every claim with its overall status and rests-on state, and every relation."""
    g = Graph()
    sql = ("SELECT c.id, c.generation, c.statement, c.label, s.status, s.rests_on, s.rests_via FROM claims c "
           "LEFT JOIN status s ON s.claim_id = c.id AND s.hardware_class = '*' ORDER BY c.id")
    for r in db.query(sql):
        g.nodes[r["id"]] = {"id": r["id"], "generation": r["generation"], "label": r["label"],
                            "statement": r["statement"], "status": r["status"] or "unverified",
                            "rests_on": r["rests_on"], "rests_via": r["rests_via"]}
    notes: dict[str, str] = {}
    for r in db.query("SELECT claim_id, path, heading FROM anchors WHERE heading IS NOT NULL AND source = 'fa-notes' "
                      "ORDER BY claim_id, idx"):
        notes.setdefault(r["claim_id"], f"{r['path']}#{r['heading']}")
    for cid, where in notes.items():
        if cid in g.nodes:
            g.nodes[cid]["note"], g.nodes[cid]["section"] = where.split("#", 1)
    g.edges = [(r["claim_id"], r["target"], r["relation"]) for r in
               db.query("SELECT claim_id, target, relation FROM claim_edges ORDER BY claim_id, relation, target")
               if r["target"] in g.nodes]
    return g


def neighbourhood(g: Graph, center: str, depth: int = 2) -> Graph:
    """`center` and everything within `depth` relation steps of it, either direction."""
    adj = g.adjacency()
    seen = {center: 0}
    queue = deque([center])
    while queue:
        n = queue.popleft()
        if seen[n] >= depth:
            continue
        for m in sorted(adj[n]):
            if m not in seen:
                seen[m] = seen[n] + 1
                queue.append(m)
    return _sub(g, set(seen))


def by_note(g: Graph, note: str, connected_only: bool = True) -> Graph:
    """The claims anchored in one note (those with a relation, by default), with the claims they point at."""
    mine = {n for n, d in g.nodes.items() if d.get("note") == note}
    if connected_only:
        touched = {n for a, b, _ in g.edges for n in (a, b) if a in mine or b in mine}
        keep = (mine & touched) | {b for a, b, _ in g.edges if a in mine}
    else:
        keep = mine | {b for a, b, _ in g.edges if a in mine}
    return _sub(g, keep)


def _sub(g: Graph, keep: set[str]) -> Graph:
    by_source = g.outgoing()
    return Graph({n: g.nodes[n] for n in sorted(keep) if n in g.nodes},
                 [e for n in sorted(keep) for e in by_source.get(n, ()) if e[1] in keep])


def to_json(g: Graph) -> dict[str, Any]:
    """Node-link JSON (networkx: `node_link_graph(data, edges="edges")`)."""
    return {"directed": True, "multigraph": True, "graph": {"relations": list(RELATIONS)},
            "nodes": [dict(d) for d in g.nodes.values()],
            "edges": [{"source": a, "target": b, "relation": r, "key": r} for a, b, r in g.edges]}


_FILL = {"verified": "#1a7f37", "refuted": "#cf222e", "stale": "#9a6700", "inconclusive": "#8250df",
         "needs-hardware": "#0969da", "unverified": "#6e7781", "review-only": "#d0d7de"}
_BORDER = {"refuted": "#cf222e", "stale": "#9a6700", "unchecked": "#6e7781", "review-only": "#afb8c1",
           "verified": "#1a7f37"}
_EDGE = {"depends_on": "solid", "refines": "dashed", "supersedes": "bold"}


def to_dot(g: Graph) -> str:
    """Graphviz DOT text (premises at the bottom: `rankdir=BT`)."""
    out = ["digraph kb {", '  rankdir=BT; node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
    for n, d in g.nodes.items():
        fill = _FILL.get(d["status"], "#6e7781")
        border = _BORDER.get(d.get("rests_on") or "", "#57606a")
        font = "#1f2328" if d["status"] == "review-only" else "#ffffff"
        tip = f"{d['status']}; rests on {d.get('rests_on') or 'nothing'}"
        out.append(f'  "{n}" [fillcolor="{fill}", color="{border}", penwidth=3, fontcolor="{font}", tooltip="{tip}"];')
    for a, b, r in g.edges:
        out.append(f'  "{a}" -> "{b}" [style={_EDGE[r]}, label="{r.replace("_", " ")}", fontsize=8];')
    out.append("}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------- layout

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 34, 24, 56, 16


def _layers(g: Graph) -> dict[str, int]:
    """Layer 0 holds claims that use nothing; a claim sits one above the highest claim it points at."""
    out_edges: dict[str, list[str]] = defaultdict(list)
    for a, b, _ in g.edges:
        if a != b:
            out_edges[a].append(b)
    layer: dict[str, int] = {}

    def depth(n: str, stack: set[str]) -> int:
        if n in layer:
            return layer[n]
        if n in stack:  # validate forbids cycles; be safe with whatever is handed in
            return 0
        stack.add(n)
        layer[n] = 1 + max((depth(m, stack) for m in out_edges[n]), default=-1)
        stack.discard(n)
        return layer[n]

    for n in g.nodes:
        depth(n, set())
    return layer


def _barycentre(n: str, nbrs: dict[str, list[str]], index: dict[str, int], layer: dict[str, int]) -> float:
    ks = [index[m] for m in nbrs[n] if m in index and layer.get(m) != layer[n]]
    return sum(ks) / len(ks) if ks else index[n]


GROUP_ROW_W = 1400  # wrap column groups into rows about this wide, so a note's graph is not one endless strip


def layout(g: Graph, group_by: str | None = None) -> tuple[dict[str, tuple[float, float]], list[tuple[str, float, float]]]:
    """Top-left corner of each node, and (label, x, y) of each group: layered, barycentre-ordered, groups packed in rows."""
    layer = _layers(g)
    groups: dict[str, list[str]] = defaultdict(list)
    for n, d in g.nodes.items():
        groups[str(d.get(group_by) or "") if group_by else ""].append(n)
    nbrs: dict[str, list[str]] = defaultdict(list)
    for a, b, _ in g.edges:
        nbrs[a].append(b)
        nbrs[b].append(a)
    label_h = 22 if group_by else 0
    boxes = []  # (label, {node: (dx, dy)}, w, h)
    for name, members in sorted(groups.items()):
        rows: dict[int, list[str]] = defaultdict(list)
        for n in sorted(members):
            rows[layer[n]].append(n)
        index = {n: i for row in rows.values() for i, n in enumerate(row)}
        for _sweep in range(4):  # barycentre sweeps, bottom-up then top-down
            for lv in (sorted(rows) if _sweep % 2 == 0 else sorted(rows, reverse=True)):
                rows[lv].sort(key=lambda n: (_barycentre(n, nbrs, index, layer), n))
                index.update({n: i for i, n in enumerate(rows[lv])})
        levels = sorted(rows, reverse=True)  # this group's own levels, top first: no empty bands
        rel = {}
        for k, lv in enumerate(levels):
            for i, n in enumerate(rows[lv]):
                rel[n] = (i * (NODE_W + GAP_X), label_h + k * (NODE_H + GAP_Y))
        w = max(len(r) for r in rows.values()) * (NODE_W + GAP_X) - GAP_X
        h = label_h + len(levels) * (NODE_H + GAP_Y) - GAP_Y
        boxes.append((name, rel, w, h))
    pos: dict[str, tuple[float, float]] = {}
    labels: list[tuple[str, float, float]] = []
    x, y, row_h = PAD, PAD, 0.0
    limit = max([GROUP_ROW_W] + [w for _, _, w, _ in boxes])
    for name, rel, w, h in boxes:
        if x > PAD and x + w > limit + PAD:
            x, y, row_h = PAD, y + row_h + GAP_Y, 0.0
        pos.update({n: (x + dx, y + dy) for n, (dx, dy) in rel.items()})
        if group_by:
            room = max(8, int(w // 7))  # ~7 px per character at 12 px: keep the label over its own columns
            labels.append((name if len(name) <= room else name[: room - 1] + "…", x, y + 14))
        x += w + 2 * GAP_X
        row_h = max(row_h, h)
    return pos, labels


def to_svg(g: Graph, href: Any = None, group_by: str | None = None, title: str = "claim graph",
           highlight: str | None = None) -> Markup:
    """Inline SVG of the graph; `href(claim_id)` gives each node's link."""
    pos, labels = layout(g, group_by)
    width = max((x for x, _ in pos.values()), default=0) + NODE_W + PAD
    height = max((y for _, y in pos.values()), default=0) + NODE_H + PAD
    out = [f'<svg class="graph" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
           f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    out += [f'<text class="group" x="{x:.0f}" y="{y:.0f}">{escape(name)}</text>' for name, x, y in labels]
    for a, b, r in g.edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1 = xa + NODE_W / 2, ya + (NODE_H if yb > ya else 0)
        x2, y2 = xb + NODE_W / 2, yb + (0 if yb > ya else NODE_H)
        mid = (y1 + y2) / 2
        out.append(f'<path class="edge rel-{r}" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} '
                   f'{x2:.0f},{y2:.0f}" marker-end="url(#arrow)"><title>{escape(a)} {r.replace("_", " ")} '
                   f'{escape(b)}</title></path>')
    for n, d in g.nodes.items():
        x, y = pos[n]
        label = n if len(n) <= 28 else n[:27] + "…"
        tip = f"{n}: {d['status']}; rests on {d.get('rests_on') or 'nothing'}. {d.get('statement', '')[:200]}"
        node = (f'<g class="node st-{escape(d["status"])} rest-{escape(d.get("rests_on") or "none")}'
                f'{" focus" if n == highlight else ""}"><title>{escape(tip)}</title>'
                f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
                f'<text x="{x + NODE_W / 2:.0f}" y="{y + NODE_H / 2:.0f}" text-anchor="middle" '
                f'dominant-baseline="central">{escape(label)}</text></g>')
        link = href(n) if href else None
        out.append(f'<a href="{escape(link)}">{node}</a>' if link else node)
    out.append("</svg>")
    return Markup("".join(out))


def graph_text(g: Graph, fmt: str) -> str:
    """The graph in `fmt` (json, dot, svg) as text."""
    if fmt == "json":
        return json.dumps(to_json(g), indent=1) + "\n"
    if fmt == "dot":
        return to_dot(g)
    style = ("<style>.node rect{fill:#6e7781;stroke:#57606a;stroke-width:3}.node text{font:11px sans-serif;fill:#fff}"
             ".st-verified rect{fill:#1a7f37}.st-refuted rect{fill:#cf222e}.st-stale rect{fill:#9a6700}"
             ".st-needs-hardware rect{fill:#0969da}.st-inconclusive rect{fill:#8250df}.st-review-only rect{fill:#d0d7de}"
             ".st-review-only text{fill:#1f2328}.rest-refuted rect{stroke:#cf222e;stroke-dasharray:5 3}"
             ".rest-stale rect,.rest-unchecked rect,.rest-review-only rect{stroke:#bf8700;stroke-dasharray:5 3}"
             ".edge{fill:none;stroke:#57606a}.rel-refines{stroke-dasharray:4 3}.rel-supersedes{stroke-width:3}</style>")
    svg = str(to_svg(g, group_by="generation" if len(g.nodes) > 60 else None))
    return svg.replace("<defs>", style + "<defs>", 1) + "\n"
