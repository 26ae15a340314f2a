"""The claim graph: nodes coloured by status, bordered by what they rest on, edges by relation.

`graph_data` selects a neighbourhood (a claim and N steps of relations either
way) or a group (the claims anchored in one note), `to_json` writes node-link
JSON that graph libraries load (networkx `node_link_graph(data, edges="edges")`),
`to_dot` writes Graphviz text, and `to_svg` lays the graph out here, at build
time, with no external tool: layers by dependency depth (a premise below what
rests on it), dummy nodes where an edge spans several rows, order within a layer
by the barycentre of neighbours, one column group per note section when asked,
and orthogonal edge routes through the free space between nodes, so no edge
crosses a node. Every node links to its claim page and names itself in full.
"""

from __future__ import annotations

import itertools
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


GROUP_ROW_W = 1100  # wrap column groups into rows this wide (the site's content width at 1440 px), not one strip
LABEL_LINE = 31  # characters per label line at 10 px in a NODE_W box; two lines hold every id up to 62
LABEL_ONE = 28  # the most characters one line at 11 px holds


@dataclass
class Layout:
    """Where everything goes: node corners, group labels, one orthogonal route (points) per edge, the size."""

    pos: dict[str, tuple[float, float]]
    labels: list[tuple[str, float, float]]
    routes: list[list[tuple[float, float]]]
    width: float
    height: float
    full_labels: dict[str, str] = field(default_factory=dict)  # group label as shown -> whole heading


def layout(g: Graph, group_by: str | None = None) -> Layout:
    """Layered layout with dummy nodes and orthogonal edge routes that never cross a node box.

    Within a group (a note section, a generation) claims sit in rows by dependency depth and columns of
    one grid; an edge spanning more than one row gets a dummy node in each row between, which takes a
    column slot like a claim (so the barycentre sweeps order it too) and which the edge passes through.
    Edges run only through the free bands between rows, the gaps between columns, the corridors between
    rows of groups and the left margin, so no edge segment crosses a node box (tests/test_graph.py).
    """
    layer = _layers(g)
    groups: dict[str, list[str]] = defaultdict(list)
    for n, d in g.nodes.items():
        groups[str(d.get(group_by) or "") if group_by else ""].append(n)
    group_of = {n: name for name, ms in groups.items() for n in ms}
    # Dummy nodes: per edge inside one group, one for every row of that group strictly between its ends.
    levels_of = {name: sorted({layer[n] for n in ms}, reverse=True) for name, ms in groups.items()}
    chains: dict[int, list[str]] = {}
    members: dict[str, list[str]] = {name: sorted(ms) for name, ms in groups.items()}
    dummy_layer: dict[str, int] = {}
    for k, (a, b, _) in enumerate(g.edges):
        if a == b or group_of[a] != group_of[b] or layer[a] <= layer[b]:
            continue  # across groups, or not downward (a cycle of disagrees_with): routed through the gaps
        between = [lv for lv in levels_of[group_of[a]] if layer[b] < lv < layer[a]]
        ids = [f"\0{k}:{lv}" for lv in between]  # NUL: no claim id can look like one
        for d, lv in zip(ids, between, strict=True):
            dummy_layer[d] = lv
            members[group_of[a]].append(d)
        chains[k] = [a, *ids, b]
    level = {**layer, **dummy_layer}
    nbrs: dict[str, list[str]] = defaultdict(list)
    for k, (a, b, _) in enumerate(g.edges):
        chain = chains.get(k, [a, b])
        for u, v in itertools.pairwise(chain):
            nbrs[u].append(v)
            nbrs[v].append(u)
    label_h = 22 if group_by else 0
    boxes = []  # (label, {node: (dx, dy)}, w, h, {node: row index})
    for name in sorted(members):
        rows: dict[int, list[str]] = defaultdict(list)
        for n in members[name]:
            rows[level[n]].append(n)
        index = {n: i for row in rows.values() for i, n in enumerate(row)}
        for _sweep in range(4):  # barycentre sweeps, bottom-up then top-down
            for lv in (sorted(rows) if _sweep % 2 == 0 else sorted(rows, reverse=True)):
                rows[lv].sort(key=lambda n: (_barycentre(n, nbrs, index, level), n))
                index.update({n: i for i, n in enumerate(rows[lv])})
        levels = sorted(rows, reverse=True)  # this group's own levels, top first: no empty bands
        rel, row_of = {}, {}
        for k, lv in enumerate(levels):
            for i, n in enumerate(rows[lv]):
                rel[n] = (i * (NODE_W + GAP_X), label_h + k * (NODE_H + GAP_Y))
                row_of[n] = k
        w = max(len(r) for r in rows.values()) * (NODE_W + GAP_X) - GAP_X
        h = label_h + len(levels) * (NODE_H + GAP_Y) - GAP_Y
        boxes.append((name, rel, w, h, row_of))
    top = PAD + GAP_Y / 2  # room above the first row for routes that leave a node upwards
    pos: dict[str, tuple[float, float]] = {}
    labels: list[tuple[str, float, float]] = []
    shown: dict[str, str] = {}  # a section heading cut to its group's width (the whole one in its <title>)
    wrap_of: dict[str, int] = {}
    wraps: list[tuple[float, float]] = []  # (top, bottom) of each row of groups
    x, y, row_h = PAD + GAP_X, top, 0.0
    limit = max([GROUP_ROW_W] + [w for _, _, w, _, _ in boxes])
    for name, rel, w, h, _ in boxes:
        if x > PAD + GAP_X and x + w > limit + PAD:
            wraps.append((y, y + row_h))
            x, y, row_h = PAD + GAP_X, y + row_h + GAP_Y, 0.0
        for n, (dx, dy) in rel.items():
            pos[n] = (x + dx, y + dy)
            wrap_of[n] = len(wraps)
        if group_by:
            room = max(8, int(w // 7))  # ~7 px per character at 12 px: keep the label over its own columns
            labels.append((name, x, y + 14))
            shown[name] = name if len(name) <= room else name[: room - 1] + "…"
        x += w + 2 * GAP_X
        row_h = max(row_h, h)
    wraps.append((y, y + row_h))
    routes = [_route(k, a, b, chains.get(k), pos, wrap_of, wraps) for k, (a, b, _) in enumerate(g.edges)]
    width = max((px for px, _ in pos.values()), default=0) + NODE_W + PAD + GAP_X
    height = max((py for _, py in pos.values()), default=0) + NODE_H + GAP_Y / 2 + PAD
    return Layout({n: p for n, p in pos.items() if n in g.nodes}, [(shown[t], x, y) for t, x, y in labels], routes,
                  width, height, {shown[t]: t for t, _, _ in labels})


def _route(k: int, a: str, b: str, chain: list[str] | None, pos: dict[str, tuple[float, float]],
           wrap_of: dict[str, int], wraps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of edge k from a's border to b's, every segment horizontal or vertical in free space."""
    # Edges sharing a band or a gap are spread a little apart (within a quarter of the band, a third of the gap).
    dy, dx = ((k % 5) - 2) * GAP_Y / 12, ((k % 3) - 1) * GAP_X / 6
    cx = {n: p[0] + NODE_W / 2 for n, p in pos.items()}

    def below(n: str) -> float:  # the free band under n's row
        return pos[n][1] + NODE_H + GAP_Y / 2 + dy

    def above(n: str) -> float:  # the free band over n's row
        return pos[n][1] - GAP_Y / 2 + dy

    if chain is not None:  # same group: a is above b; straight down through the dummies' slots
        pts = [(cx[a], pos[a][1] + NODE_H)]
        for u, v in itertools.pairwise(chain):
            band = below(u)
            pts += [(pts[-1][0], band), (cx[v] if v == b else cx[v] + dx, band)]
        return [*pts, (cx[b], pos[b][1])]
    down = (wrap_of[b], pos[b][1]) > (wrap_of[a], pos[a][1])
    start = (cx[a], pos[a][1] + (NODE_H if down else 0))
    end = (cx[b], pos[b][1] + (0 if down else NODE_H))
    band_a = below(a) if down else above(a)
    band_b = above(b) if down else below(b)
    # The gap beside b's column on the side facing a: free in every row of b's group.
    gap_b = pos[b][0] + (NODE_W + GAP_X / 2 if cx[a] > cx[b] else -GAP_X / 2) + dx
    pts = [start, (start[0], band_a)]
    if wrap_of[a] != wrap_of[b]:
        # Leave a's row of groups by the gap beside a, along the corridor between rows of groups, and, when
        # b's row of groups is not the next one, down (or up) the left margin to the corridor beside it.
        gap_a = pos[a][0] + NODE_W + GAP_X / 2 + dx
        wa, wb = wraps[wrap_of[a]], wraps[wrap_of[b]]
        corridor_a = (wa[1] + GAP_Y / 2 + dy) if down else (wa[0] - GAP_Y / 2 + dy)
        corridor_b = (wb[0] - GAP_Y / 2 + dy) if down else (wb[1] + GAP_Y / 2 + dy)
        pts += [(gap_a, band_a), (gap_a, corridor_a)]
        if abs(wrap_of[a] - wrap_of[b]) > 1:
            margin = PAD / 2 + (k % 4) * GAP_X / 8  # several edges down the margin: side by side, not one line
            pts += [(margin, corridor_a), (margin, corridor_b)]
        pts += [(gap_b, pts[-1][1] if abs(wrap_of[a] - wrap_of[b]) == 1 else corridor_b)]
    elif band_a != band_b or abs(cx[a] - cx[b]) > 0:
        pts += [(gap_b, band_a)]
    pts += [(gap_b, band_b), (end[0], band_b), end]
    return _simplify(pts)


def _simplify(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop repeated points and the middle one of three in a line."""
    out: list[tuple[float, float]] = []
    for p in pts:
        if out and out[-1] == p:
            continue
        if len(out) >= 2 and (out[-2][0] == out[-1][0] == p[0] or out[-2][1] == out[-1][1] == p[1]):
            out[-1] = p
            continue
        out.append(p)
    return out


def label_lines(n: str) -> list[str]:
    """A claim id in one or two lines of at most LABEL_LINE characters, broken after a '.' or '-'.

    Only an id longer than two lines is cut (with '…'); the node's <title> and aria-label carry it whole.
    """
    if len(n) <= LABEL_ONE:
        return [n]
    cut = max(n.rfind(c, 0, LABEL_LINE) for c in ".-_")
    cut = cut + 1 if cut > 0 else LABEL_LINE
    rest = n[cut:]
    return [n[:cut], rest if len(rest) <= LABEL_LINE else rest[: LABEL_LINE - 1] + "…"]


def to_svg(g: Graph, href: Any = None, group_by: str | None = None, title: str = "claim graph",
           highlight: str | None = None) -> Markup:
    """Inline SVG of the graph; `href(claim_id)` gives each node's link.

    Every node is focusable (a link, or tabindex=0 without one) and names itself in full: the id in one
    or two lines on the box, and id, status and statement in its <title> (hover) and aria-label (focus).
    """
    lay = layout(g, group_by)
    out = [f'<svg class="graph" viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" width="{lay.width:.0f}" '
           f'height="{lay.height:.0f}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    out += [f'<text class="group" x="{x:.0f}" y="{y:.0f}"><title>{escape(lay.full_labels.get(name, name))}</title>'
            f'{escape(name)}</text>' for name, x, y in lay.labels]
    for (a, b, r), pts in zip(g.edges, lay.routes, strict=True):
        d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<path class="edge rel-{r}" d="{d}" marker-end="url(#arrow)"><title>{escape(a)} '
                   f'{r.replace("_", " ")} {escape(b)}</title></path>')
    for n, d in g.nodes.items():
        x, y = lay.pos[n]
        lines = label_lines(n)
        tip = f"{n}: {d['status']}; rests on {d.get('rests_on') or 'nothing'}. {d.get('statement', '')[:200]}"
        cls = f'node st-{escape(d["status"])} rest-{escape(d.get("rests_on") or "none")}{" focus" if n == highlight else ""}'
        mid = y + NODE_H / 2
        if len(lines) == 1:
            text = (f'<text x="{x + NODE_W / 2:.0f}" y="{mid:.0f}" text-anchor="middle" '
                    f'dominant-baseline="central">{escape(n)}</text>')
        else:
            text = (f'<text class="two" x="{x + NODE_W / 2:.0f}" y="{mid:.0f}" text-anchor="middle" '
                    f'dominant-baseline="central">'
                    + "".join(f'<tspan x="{x + NODE_W / 2:.0f}" y="{mid + off:.0f}">{escape(t)}</tspan>'
                              for t, off in zip(lines, (-6.5, 6.5), strict=True)) + "</text>")
        body = f'<title>{escape(tip)}</title><rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="6"/>{text}'
        link = href(n) if href else None
        if link:
            out.append(f'<a href="{escape(link)}" aria-label="{escape(tip)}"><g class="{cls}">{body}</g></a>')
        else:
            out.append(f'<g class="{cls}" tabindex="0" aria-label="{escape(tip)}">{body}</g>')
    out.append("</svg>")
    return Markup("".join(out))


def graph_text(g: Graph, fmt: str) -> str:
    """The graph in `fmt` (json, dot, svg) as text."""
    if fmt == "json":
        return json.dumps(to_json(g), indent=1) + "\n"
    if fmt == "dot":
        return to_dot(g)
    style = ("<style>.node rect{fill:#6e7781;stroke:#57606a;stroke-width:3}.node text{font:11px sans-serif;fill:#fff}"
             ".node text.two{font-size:10px}.node:focus{outline:none}.node:focus rect,a:focus .node rect{stroke:#0550ae;"
             "stroke-width:5}"
             ".st-verified rect{fill:#1a7f37}.st-refuted rect{fill:#cf222e}.st-stale rect{fill:#9a6700}"
             ".st-needs-hardware rect{fill:#0969da}.st-inconclusive rect{fill:#8250df}.st-review-only rect{fill:#d0d7de}"
             ".st-review-only text{fill:#1f2328}.rest-refuted rect{stroke:#cf222e;stroke-dasharray:5 3}"
             ".rest-stale rect,.rest-unchecked rect,.rest-review-only rect{stroke:#bf8700;stroke-dasharray:5 3}"
             ".edge{fill:none;stroke:#57606a}.rel-refines{stroke-dasharray:4 3}.rel-supersedes{stroke-width:3}</style>")
    svg = str(to_svg(g, group_by="generation" if len(g.nodes) > 60 else None))
    return svg.replace("<defs>", style + "<defs>", 1) + "\n"
