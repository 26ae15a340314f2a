"""GPU names, SKUs and architectures: what `kb claims --arch A100` and `--waiting-for H200` mean.

The hardware sheets in `sources/hardware.yaml` say which architecture each GPU is (`A100` has
`compute_capability: 80`, so `--arch A100` means sm_80); nothing here lists a GPU by hand. A value is
read as an architecture (`sm_80`, `sm80`, `sm_90a`, `compute_90`, `8.0`, `80`), else as a GPU name or SKU
that starts with a sheet's id (`A100`, `a100-sxm4-80gb`, `NVIDIA H100 80GB HBM3`), else as the family
name in a sheet's title (`Hopper`). Anything else is refused with the closest names.

Scope and requirement texts are free text written by people; `named_in` reads the architectures they
name: `sm_NN` tokens (with an `a`/`f` suffix kept), ranges as `kb.verify.registry.Requirements.describe`
writes them (`sm_100..sm_103`, `sm_80..newer`), and the ids of the hardware sheets (`(H200)`).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

# sm_90, sm90, sm_90a, compute_90; the suffix is kept (sm_90a code needs Hopper's arch-specific features).
_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:sm_?|compute_)(\d{2,3})([af]?)(?![A-Za-z0-9])", re.IGNORECASE)
# Ranges as Requirements.describe writes them: sm_100..sm_103, sm_80..newer, any..sm_90.
_RANGE = re.compile(r"(?:sm_(\d{2,3})|any)\.\.(?:sm_(\d{2,3})|newer)", re.IGNORECASE)
_ARCH_VALUE = re.compile(r"(?:sm_?|compute_)?(\d{2,3})([af]?)", re.IGNORECASE)
_DOTTED = re.compile(r"(\d{1,2})\.(\d)")
_NEWEST = 10_000


class UnknownArch(ValueError):
    """A value that names no architecture and no GPU of a hardware sheet."""

    def __init__(self, value: str, suggestions: list[str], known: list[str]) -> None:
        """Keep the value, the closest known names and every known name."""
        self.value, self.suggestions, self.known = value, suggestions, known
        hint = f"did you mean {', '.join(suggestions)}? " if suggestions else ""
        super().__init__(f"{value!r} names no architecture and no GPU of the hardware sheets ({hint}"
                         f"known: {', '.join(known)}, or an architecture such as sm_80)")


@dataclass(frozen=True)
class Arch:
    """An architecture asked for: compute capability, and a suffix (`a`, `f`) only when asked for explicitly."""

    cc: int
    suffix: str = ""
    given: str = ""

    @property
    def label(self) -> str:
        """`sm_80`, `sm_90a`; the GPU name it came from in brackets when one was given."""
        sm = f"sm_{self.cc}{self.suffix}"
        return sm if not self.given or self.given.lower().replace("_", "") == sm.replace("_", "") else f"{sm} ({self.given})"


@dataclass(frozen=True)
class Named:
    """An architecture (or a range of them) a text names."""

    lo: int
    hi: int
    suffix: str = ""


@dataclass(frozen=True)
class Sheet:
    """One hardware sheet: its id (the GPU), its compute capability, its family (from the title)."""

    id: str
    cc: int
    family: str


def sheets_from_rows(rows: list[dict[str, Any]]) -> list[Sheet]:
    """Hardware sheets from `sources` rows of the index (their `json` column) or from Source records as dicts."""
    out = []
    for r in rows:
        rec = json.loads(r["json"]) if "json" in r and isinstance(r["json"], str) else r
        if rec.get("kind") != "hardware":
            continue
        cc = (rec.get("constants") or {}).get("compute_capability")
        if not isinstance(cc, int | float):
            continue
        # "NVIDIA A100 SXM4 80GB (Ampere, sm_80)" -> Ampere
        m = re.search(r"\(([A-Za-z]+)\s*,", rec.get("title") or "")
        out.append(Sheet(id=rec["id"], cc=int(cc), family=m.group(1) if m else ""))
    return out


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).upper().removeprefix("NVIDIA")


def resolve(value: str, sheets: list[Sheet]) -> Arch:
    """The architecture `value` means; raises UnknownArch with suggestions.

    `sm_80`, `sm80`, `compute_80`, `80` and `8.0` are sm_80; `sm_90a` keeps its suffix; a GPU name or SKU
    resolves through the sheet whose id it starts with (`A100-SXM4-80GB` is the A100 sheet); a family
    name (`Hopper`) through the sheets' titles.
    """
    v = value.strip()
    if m := _ARCH_VALUE.fullmatch(v):
        return Arch(int(m.group(1)), m.group(2).lower(), v)
    if m := _DOTTED.fullmatch(v):
        return Arch(int(m.group(1)) * 10 + int(m.group(2)), "", v)
    norm = _norm(v)
    for s in sorted(sheets, key=lambda s: -len(s.id)):  # the longest id first: GH200 before H200, if both exist
        if norm.startswith(_norm(s.id)):
            return Arch(s.cc, "", v)
    families = {s.family.upper(): s for s in sheets if s.family}
    if norm in families:
        return Arch(families[norm].cc, "", v)
    known = sorted({s.id for s in sheets} | {s.family for s in sheets if s.family})
    close = difflib.get_close_matches(v.upper(), [k.upper() for k in known], n=3, cutoff=0.5)
    by_upper = {k.upper(): k for k in known}
    raise UnknownArch(v, [by_upper[c] for c in close], known)


def named_in(text: str | None, sheets: list[Sheet]) -> list[Named]:
    """Every architecture a free text names: sm tokens, describe-style ranges, hardware sheet ids."""
    if not text:
        return []
    out: list[Named] = []
    for m in _RANGE.finditer(text):
        lo = int(m.group(1)) if m.group(1) else 0
        hi = int(m.group(2)) if m.group(2) else _NEWEST
        out.append(Named(lo, hi))
    for m in _TOKEN.finditer(text):
        cc = int(m.group(1))
        out.append(Named(cc, cc, m.group(2).lower()))
    for s in sheets:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(s.id)}(?![0-9])", text, flags=re.IGNORECASE):
            out.append(Named(s.cc, s.cc))
    return out


def names(named: list[Named], arch: Arch, strict_suffix: bool = True) -> bool:
    """Whether any of `named` is `arch`: within its range, and with the same suffix when `arch` has one.

    `strict_suffix=False` compares the hardware only (an H100 runs sm_90 and sm_90a code alike).
    """
    return any(n.lo <= arch.cc <= n.hi and (not strict_suffix or not arch.suffix or n.suffix == arch.suffix)
               for n in named)


def requirement_text(reason: str | None) -> str:
    """The hardware requirement inside a status reason: what follows `needs` up to the method or a note.

    Experiment claims read `needs sm_80 running FA2 v2.0.0: <method>`; pending checks read
    `check 0 (gpu.benchmark) needs CUDA sm_90..sm_90, package torch`, alone or after a verified verdict as
    `(also pending: ...)`. The method text after the colon is not a requirement and is left out.
    """
    if not reason:
        return ""
    if "(also pending: " in reason:
        reason = reason.split("(also pending: ", 1)[1]
    m = re.search(r"\bneeds (.+?)(?=: |; |\)$|$)", reason)
    return m.group(1) if m else ""
