"""Charts for the static site, drawn at build time as inline SVG (no script, no external file).

Every chart is as wide as its container and never scaled: horizontal positions
are percentages and there is no viewBox, so its 12 px labels stay 12 px on a
390 px phone as on a desktop. A row's label and value sit on one line, its bar
on the next, so no fixed-width label column has to fit beside the bars.

Colours come from the page's stylesheet through `st-<status>` classes, so the
palette lives in one place (site/static/style.css).

For screen readers: a chart without links is one image (`role="img"`) whose
label reads every value; a chart whose segments link into the claim list is a
group of links, each named by what it counts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

LINE = 14  # a 12px text line
BAR_H = 14
ROW = LINE + 4 + BAR_H + 10  # a stacked bar: label and count on one line, the bar below
VROW = 2 * LINE + 4 + BAR_H + 10  # a value bar: its label, its value, then the bar
LABEL_MAX = 44  # characters; longer labels are cut (the full text is in the bar's tooltip)


def _pct(x: float) -> str:
    return f"{max(0.0, min(100.0, x)):.2f}%"


def _num(v: float) -> str:
    """A value as short text: 656.3, 0.663, 1.91, 4.05e+08."""
    if v == 0:
        return "0"
    if abs(v) >= 1e6 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "…"


def _open(height: int, title: str, desc: str, linked: bool, cls: str = "") -> list[str]:
    """The <svg> element: full width, fixed height, never scaled; named for assistive technology."""
    role = 'role="group"' if linked else 'role="img"'
    label = title + (f". {desc}" if desc and not linked else "")
    return [f'<svg class="chart{" " + cls if cls else ""}" width="100%" height="{height}" {role} '
            f'aria-label="{escape(label)}" focusable="false">', f"<title>{escape(title)}</title>"]


def _row_text(y: int, label: str, value: str) -> str:
    return (f'<text class="chart-label" x="0" y="{y + LINE - 3}">{escape(_cut(label))}</text>'
            f'<text class="chart-count" x="100%" y="{y + LINE - 3}" text-anchor="end">{escape(value)}</text>')


def stacked_bars(
    rows: Sequence[tuple[str, Mapping[str, int]]],
    order: Sequence[str],
    href: Callable[[str, str], str] | None = None,
    title: str = "",
) -> Markup:
    """Horizontal bars, one per row, split into `order` segments; each segment may link to `href(row, part)`."""
    top = max((sum(c.values()) for _, c in rows), default=0) or 1
    height = len(rows) * ROW
    out = _open(height, title, "", linked=href is not None)
    for i, (name, counts) in enumerate(rows):
        y = i * ROW
        out.append(_row_text(y, name, str(sum(counts.values()))))
        x = 0.0
        for part in order:
            n = counts.get(part, 0)
            if not n:
                continue
            w = 100 * n / top
            what = f"{name}: {n} {part}"
            rect = (f'<rect class="st-{escape(part)}" x="{_pct(x)}" y="{y + LINE + 4}" width="{_pct(max(w, 0.4))}" '
                    f'height="{BAR_H}"><title>{escape(what)}</title></rect>')
            out.append(f'<a href="{escape(href(name, part))}" aria-label="{escape(what)}">{rect}</a>' if href else rect)
            x += w
    out.append("</svg>")
    return Markup("".join(out))


@dataclass
class Bar:
    """One row of a value chart: a measured value, optionally its spread and its own expected range."""

    label: str
    value: float
    href: str | None = None
    spread: tuple[float, float] | None = None  # e.g. the p20-p80 of the timings behind a median
    expected: tuple[float | None, float | None] | None = None  # this row's expectation, where rows differ
    ok: bool | None = None  # whether the value meets its expectation (colours the bar)
    text: str | None = None  # the value as printed (default: the number and the unit)
    status: str | None = None  # a claim status that colours the bar instead of `ok` (st-<status>)


def value_bars(rows: Sequence[Bar], unit: str, title: str = "", reference: tuple[str, float] | None = None,
               band: tuple[float | None, float | None] | None = None, band_label: str = "",
               top: float | None = None) -> Markup:
    """Horizontal bars of measured values, with an optional shared expected band and a reference line (a peak).

    `band` is (low, high); either end may be None (at least / at most). Rows may carry their own
    expected range instead (`Bar.expected`), drawn behind their own bar only.
    """
    values = [r.value for r in rows] + [r.spread[1] for r in rows if r.spread]
    values += [reference[1]] if reference else []
    values += [v for v in (band or ()) if v is not None]
    top = top or (max(values, default=0) * 1.04) or 1
    foot = LINE + 6 if reference else 0
    height = len(rows) * VROW + foot
    linked = any(r.href for r in rows)
    summary = "; ".join(f"{r.label}: {r.text or _num(r.value) + ' ' + unit}" for r in rows)
    if band:
        summary += f"; expected {band_label or _band_text(band, unit)}"
    if reference:
        summary += f"; {reference[0]} {_num(reference[1])} {unit}"
    out = _open(height, title, summary, linked)

    def x(v: float) -> str:
        return _pct(100 * v / top)

    bars_bottom = len(rows) * VROW - 10
    if band:
        lo, hi = band[0] or 0.0, band[1] if band[1] is not None else top
        out.append(f'<rect class="chart-band" x="{x(lo)}" y="{2 * LINE}" width="{_pct(100 * max(hi - lo, top / 400) / top)}" '
                   f'height="{bars_bottom - 2 * LINE}"><title>expected {escape(band_label or _band_text(band, unit))}</title></rect>')
    for i, r in enumerate(rows):
        y = i * VROW
        by = y + 2 * LINE + 4
        out.append(f'<text class="chart-label" x="0" y="{y + LINE - 3}">{escape(_cut(r.label))}</text>'
                   f'<text class="chart-count" x="0" y="{y + 2 * LINE - 3}">{escape(r.text or f"{_num(r.value)} {unit}")}</text>')
        if r.expected:
            lo, hi = r.expected[0] or 0.0, r.expected[1] if r.expected[1] is not None else top
            out.append(f'<rect class="chart-band" x="{x(lo)}" y="{by - 2}" width="{_pct(100 * max(hi - lo, top / 200) / top)}" '
                       f'height="{BAR_H + 4}"/>')
        cls = f"st-{r.status}" if r.status else {True: "st-verified", False: "st-refuted", None: "st-derived"}[r.ok]
        tip = f"{r.label}: {r.text or _num(r.value) + ' ' + unit}"
        bar = (f'<rect class="{cls}" x="0" y="{by}" width="{_pct(max(100 * r.value / top, 0.4))}" height="{BAR_H}">'
               f"<title>{escape(tip)}</title></rect>")
        out.append(f'<a href="{escape(r.href)}" aria-label="{escape(tip)}">{bar}</a>' if r.href else bar)
        if r.spread:
            mid = by + BAR_H / 2
            a, b = x(r.spread[0]), x(r.spread[1])
            out.append(f'<line class="chart-whisker" x1="{a}" x2="{b}" y1="{mid}" y2="{mid}"/>'
                       f'<line class="chart-whisker" x1="{a}" x2="{a}" y1="{by + 2}" y2="{by + BAR_H - 2}"/>'
                       f'<line class="chart-whisker" x1="{b}" x2="{b}" y1="{by + 2}" y2="{by + BAR_H - 2}"/>')
    if reference:
        rx = 100 * reference[1] / top
        out.append(f'<line class="chart-ref" x1="{_pct(rx)}" x2="{_pct(rx)}" y1="{2 * LINE}" y2="{bars_bottom + 4}"/>')
        anchor = "end" if rx > 50 else "start"
        out.append(f'<text class="chart-note" x="{_pct(rx)}" y="{height - 4}" text-anchor="{anchor}">'
                   f"{escape(reference[0])} {_num(reference[1])} {escape(unit)}</text>")
    out.append("</svg>")
    return Markup("".join(out))


def _band_text(band: tuple[float | None, float | None], unit: str) -> str:
    lo, hi = band
    if lo is not None and hi is not None:
        return f"{_num(lo)}–{_num(hi)} {unit}" if lo != hi else f"= {_num(lo)} {unit}"
    return f"≥ {_num(lo)} {unit}" if lo is not None else f"≤ {_num(hi or 0)} {unit}"


def _bytes(v: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.0f} B"


def sweep_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], title: str, x_name: str = "N",
                height: int = 220) -> Markup:
    """Bytes against a swept size on log-log axes, one line per run, with linear and quadratic growth dashed.

    The guides start at the first point of the first (newest) series: a line parallel to `linear` grows
    as N, one parallel to `quadratic` as N^2, so the slope of the measured line reads as its exponent.
    The x-axis labels carry the newest run's bytes at each N.
    """
    pts = [p for _, s in series for p in s if p[0] > 0 and p[1] > 0]
    if not pts:
        return Markup("")
    n0, b0 = series[0][1][0]
    n1 = max(n for n, _ in pts)
    guides = [("linear in " + x_name, [(n0, b0), (n1, b0 * n1 / n0)]),
              ("quadratic in " + x_name, [(n0, b0), (n1, b0 * (n1 / n0) ** 2)])]
    ys = [b for _, b in pts] + [b for _, g in guides for _, b in g]
    xmin, xmax = math.log(min(n for n, _ in pts)), math.log(n1)
    ymin, ymax = math.log(min(ys)), math.log(max(ys))
    top, bottom = LINE + 6, height - 2 * LINE - 10
    xspan, yspan = (xmax - xmin) or 1.0, (ymax - ymin) or 1.0

    def px(n: float) -> str:  # 3%..97% of the width
        return _pct(3 + 94 * (math.log(n) - xmin) / xspan)

    def py(b: float) -> float:
        return bottom - (bottom - top) * (math.log(b) - ymin) / yspan

    summary = "; ".join(f"{name}: " + ", ".join(f"{x_name}={n:g} {_bytes(b)}" for n, b in s) for name, s in series)
    out = _open(height, title, summary, linked=False, cls="sweep")
    out.append(f'<line class="chart-axis" x1="0" x2="100%" y1="{bottom + 6}" y2="{bottom + 6}"/>')
    newest = dict(series[0][1])
    ns = sorted({n for n, _ in pts})
    for n in ns:
        anchor = "start" if n == ns[0] else "end" if n == ns[-1] else "middle"
        x = "0%" if n == ns[0] else "100%" if n == ns[-1] else px(n)
        out.append(f'<text class="chart-label" x="{x}" y="{bottom + LINE + 8}" text-anchor="{anchor}">{x_name}={n:g}</text>')
        if n in newest:
            out.append(f'<text class="chart-count" x="{x}" y="{bottom + 2 * LINE + 8}" text-anchor="{anchor}">'
                       f"{_bytes(newest[n])}</text>")
    for name, g in guides:
        (na, ba), (nb, bb) = g
        out.append(f'<line class="chart-guide" x1="{px(na)}" y1="{py(ba):.1f}" x2="{px(nb)}" y2="{py(bb):.1f}">'
                   f"<title>{escape(name)}</title></line>")
        out.append(f'<text class="chart-note" x="100%" y="{py(bb) - 6:.1f}" text-anchor="end">{escape(name)}</text>')
    for name, s in series:
        for (na, ba), (nb, bb) in itertools.pairwise(s):
            out.append(f'<line class="chart-series" x1="{px(na)}" y1="{py(ba):.1f}" x2="{px(nb)}" y2="{py(bb):.1f}"/>')
        for n, b in s:
            out.append(f'<circle class="chart-point" cx="{px(n)}" cy="{py(b):.1f}" r="4">'
                       f"<title>{escape(name)}: {x_name}={n:g}, {_bytes(b)}</title></circle>")
    out.append("</svg>")
    return Markup("".join(out))
