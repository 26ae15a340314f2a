"""Charts for the static site, drawn at build time as inline SVG (no script, no external file).

Colours come from the page's stylesheet through `st-<status>` classes, so the
palette lives in one place (site/static/style.css).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup, escape

CHAR_W = 7  # enough for 12px system-ui text
BAR_W = 560
ROW_H = 22
GAP = 8
COUNT_W = 48


def stacked_bars(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    order: Sequence[str],
    href: Callable[[str, str], str] | None = None,
    title: str = "",
) -> Markup:
    """Horizontal bars, one per row, split into `order` segments; each segment may link to `href(row, part)`."""
    top = max((sum(c.values()) for _, c in rows), default=0) or 1
    height = len(rows) * (ROW_H + GAP) + GAP
    label_w = max(48, CHAR_W * max((len(name) for name, _ in rows), default=0) + 12)
    width = label_w + BAR_W + COUNT_W
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">', f"<title>{escape(title)}</title>"]
    for i, (name, counts) in enumerate(rows):
        y = GAP + i * (ROW_H + GAP)
        out.append(f'<text class="chart-label" x="{label_w - 8}" y="{y + ROW_H / 2}" text-anchor="end" '
                   f'dominant-baseline="central">{escape(name)}</text>')
        x = float(label_w)
        for part in order:
            n = counts.get(part, 0)
            if not n:
                continue
            w = BAR_W * n / top
            rect = (f'<rect class="st-{escape(part)}" x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" height="{ROW_H}">'
                    f"<title>{escape(name)}: {n} {escape(part)}</title></rect>")
            out.append(f'<a href="{escape(href(name, part))}">{rect}</a>' if href else rect)
            x += w
        out.append(f'<text class="chart-count" x="{x + 6:.1f}" y="{y + ROW_H / 2}" '
                   f'dominant-baseline="central">{sum(counts.values())}</text>')
    out.append("</svg>")
    return Markup("".join(out))
