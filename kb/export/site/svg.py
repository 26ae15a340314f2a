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


def value_bars(rows: Sequence[tuple[str, float, str]], unit: str, title: str = "",
               reference: tuple[str, float] | None = None) -> Markup:
    """Horizontal bars of measured values (label, value, href), with an optional reference line (e.g. peak)."""
    top = max([v for _, v, _ in rows] + ([reference[1]] if reference else []), default=0) or 1
    height = len(rows) * (ROW_H + GAP) + GAP + (ROW_H if reference else 0)
    label_w = max(48, CHAR_W * max((len(name) for name, _, _ in rows), default=0) + 12)
    width = label_w + BAR_W + COUNT_W * 2
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">', f"<title>{escape(title)}</title>"]
    for i, (name, value, href) in enumerate(rows):
        y = GAP + i * (ROW_H + GAP)
        w = BAR_W * value / top
        out.append(f'<text class="chart-label" x="{label_w - 8}" y="{y + ROW_H / 2}" text-anchor="end" '
                   f'dominant-baseline="central">{escape(name)}</text>')
        bar = f'<rect class="st-verified" x="{label_w}" y="{y}" width="{w:.1f}" height="{ROW_H}"><title>' \
              f'{escape(name)}: {value:g} {escape(unit)}</title></rect>'
        out.append(f'<a href="{escape(href)}">{bar}</a>' if href else bar)
        out.append(f'<text class="chart-count" x="{label_w + w + 6:.1f}" y="{y + ROW_H / 2}" '
                   f'dominant-baseline="central">{value:g} {escape(unit)}</text>')
    if reference:
        x = label_w + BAR_W * reference[1] / top
        out.append(f'<line class="chart-ref" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - ROW_H}" '
                   f'stroke="currentColor" stroke-dasharray="4 3"/>')
        out.append(f'<text class="chart-count" x="{x:.1f}" y="{height - ROW_H / 2}" text-anchor="middle" '
                   f'dominant-baseline="central">{escape(reference[0])} {reference[1]:g} {escape(unit)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
