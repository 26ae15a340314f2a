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
