"""Terminal rendering: plain tables that fit a terminal, JSON for scripts."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], wrap_last: bool = True) -> str:
    """A plain text table; on a terminal the last column is cut to its width, when piped nothing is cut."""
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
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
