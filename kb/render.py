"""Terminal rendering: plain tables that fit a terminal, JSON for scripts.

Record text is data: control characters in it (an OSC or CSI escape
sequence, a carriage return, any C0/C1 character) never reach the terminal
raw; `safe` shows them escaped (ESC as the four characters `\\x1b`).
JSON output needs nothing: `json.dumps` escapes them.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import click

# C0 controls, DEL and C1 controls; newline and tab are kept where a layout needs them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def safe(text: Any, layout: bool = True) -> str:
    """`text` with control characters shown escaped; newline and tab kept when `layout`, escaped otherwise."""
    return (_CONTROL if layout else _CONTROL_ANY).sub(_escape, "" if text is None else str(text))


def echo(message: Any = "", err: bool = False) -> None:
    """click.echo of text that may hold record data, its control characters escaped."""
    click.echo(safe(message), err=err)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], wrap_last: bool = True) -> str:
    """A plain text table; on a terminal the last column is cut to its width, when piped nothing is cut."""
    cells = [[safe(c, layout=False) for c in r] for r in rows]  # one line per row: even newlines are escaped
    piped = not sys.stdout.isatty()
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r[:-1] if wrap_last else r):
            widths[i] = max(widths[i], len(c)) if piped else min(max(widths[i], len(c)), 48)
    term = shutil.get_terminal_size((120, 24)).columns
    lead = sum(w + 2 for w in widths[:-1])
    if piped:  # piped or redirected: keep every character for the reader downstream
        last = max([len(headers[-1]), *(len(r[-1]) for r in cells)])
    else:
        last = max(20, term - lead) if wrap_last else widths[-1]

    def fmt(r: Sequence[str]) -> str:
        parts = [c[: widths[i]].ljust(widths[i]) for i, c in enumerate(r[:-1])]
        tail = r[-1] if len(r[-1]) <= last else r[-1][: last - 1] + "…"
        return "  ".join([*parts, tail]).rstrip()

    out = [fmt(list(headers)), fmt(["-" * w for w in widths[:-1]] + ["-" * min(last, max(len(headers[-1]), 8))])]
    out += [fmt(r) for r in cells]
    return "\n".join(out)


def emit_json(data: Any) -> None:
    """JSON to stdout, one document."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def term_width() -> int | None:
    """The width a table must fit: $COLUMNS when set, else the terminal's; None when stdout is piped (cut nothing)."""
    import os

    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else None


def fitted_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], width: int | None,
                 min_last: int = 30) -> str:
    """A table whose last column wraps to fit `width` columns; nothing is ever cut.

    The other columns keep their full width (ids are copied from here). When at least `min_last` columns
    are left, the last column wraps within its place; when fewer, it goes under its row, indented, across
    the whole width. `width=None` (a pipe, or --wide): one line per row.
    """
    import textwrap

    cells = [[safe(c, layout=False) for c in r] for r in rows]  # one line per row: even newlines are escaped
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers[:-1])]
    lead = sum(w + 2 for w in widths)

    def head(r: Sequence[str]) -> str:
        return "  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:-1]))

    rule = [*("-" * w for w in widths), "-" * max(len(headers[-1]), 8)]
    if width is None or width - lead >= min_last:
        room = None if width is None else width - lead
        out = []
        for r in [list(headers), rule, *cells]:
            lines = [r[-1]] if room is None else (textwrap.wrap(r[-1], room, break_on_hyphens=False) or [""])
            out.append(f"{head(r)}  {lines[0]}".rstrip())
            out += [" " * lead + more for more in lines[1:]]
        return "\n".join(out)
    # Too narrow for a column of its own: the last column under each row, indented by four.
    out = [head(list(headers)).rstrip(), f"    {headers[-1]}", head(rule).rstrip()]
    for r in cells:
        out.append(head(r).rstrip())
        out += ["    " + line for line in textwrap.wrap(r[-1], max(width - 4, 20), break_on_hyphens=False)]
    return "\n".join(out)
