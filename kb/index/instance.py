"""Which template instance a `derived` verdict rests on: typed by the KB, or launched by the pinned dispatch.

A `code.constexpr` check compiles the pinned headers and reads members of a
traits type. When its prelude names the instance with literal arguments
(`using T = Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t>;`),
the compiler confirms what that instance holds, but the choice of instance is
the KB's own transcription: it does not show that the pinned code picks it for
the input the statement is about (issue #22, item 7). So a derived verdict that
rests only on such checks carries a grade note:

- `kb-instance`: the instance was typed by the KB, and no launch trace on
  record shows the pinned dispatch launching it;
- `dispatch-seen`: the instance was typed by the KB, and a `code.launch-trace`
  run (the pinned host code driven on a virtual device) recorded the pinned
  dispatch launching exactly this instance; the note names the input.

A verdict that another derived check also decides (a launch trace, a structure
query, executed host code) carries no note. This is a pass over the whole
index after the per-claim derivation, like `rests_on`: the launch trace that
shows an instance may belong to another claim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_TRAITS = re.compile(r"\b(\w+_kernel_traits)\s*<")
_INT = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")


@dataclass(frozen=True)
class Instance:
    """One traits instance: template name and its arguments, integers in decimal, spaces removed."""

    name: str
    args: tuple[str, ...]

    def covered_by(self, other: Instance) -> bool:
        """The other (a recorded launch, with defaulted trailing arguments spelt out) is this instance."""
        return self.name == other.name and other.args[:len(self.args)] == self.args

    def text(self) -> str:
        """The instance as C++ text."""
        return f"{self.name}<{', '.join(self.args)}>"


def _split_args(body: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [_norm(p) for p in parts]


def _norm(arg: str) -> str:
    arg = re.sub(r"\s+", "", arg)
    m = _INT.fullmatch(arg)
    return str(int(m.group(1), 0)) if m else arg


def instances(text: str) -> list[Instance]:
    """Every `*_kernel_traits<...>` instance written in a piece of C++ text (a prelude, a demangled name)."""
    out = []
    for m in _TRAITS.finditer(text):
        i = j = m.end()
        depth = 1
        while depth and j < len(text):
            depth += {"<": 1, ">": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            out.append(Instance(m.group(1), tuple(_split_args(text[i:j - 1]))))
    return out


def typed_instances(params: Mapping[str, Any], snippet: Any = None) -> list[Instance]:
    """The instances a `code.constexpr` check's prelude types with literal arguments (none for other checks).

    `snippet(name)` returns a named prelude snippet's text (verifiers/snippets/constexpr/NAME.h).
    """
    prelude = str(params.get("prelude") or "")
    if snippet is not None and re.fullmatch(r"[A-Za-z0-9_-]+", prelude):
        prelude = snippet(prelude) or ""
    # Typed with literal sizes (the traits' leading arguments); an alias over template parameters types none.
    return [i for i in instances(prelude) if i.args and _INT.fullmatch(i.args[0])]


@dataclass(frozen=True)
class Launch:
    """An instance the pinned dispatch launched in a recorded trace, and for which input."""

    instance: Instance
    claim_id: str
    run_id: str
    input: str


def dispatched(runs: Iterable[Mapping[str, Any]]) -> list[Launch]:
    """Instances recorded by `code.launch-trace` runs whose harness ran (rc 0), whatever their verdict."""
    out = []
    for run in runs:
        meas = run.get("measurements") or {}
        if (meas.get("harness_rc") or {}).get("value") != 0:
            continue
        kernels = str((meas.get("kernels") or {}).get("value") or "")
        p = run.get("params") or {}
        what = (f"{p.get('impl')} {p.get('phase', 'fwd')} on a virtual {p.get('device')}, {p.get('dtype', 'float16')}, "
                f"d={p.get('head_dim')}, N={p.get('seqlen_q')}" + (", causal" if p.get("causal") else ""))
        for inst in instances(kernels):
            out.append(Launch(inst, run.get("claim_id", ""), run.get("run_id", ""), what))
    return out


def note(typed: list[Instance], launches: list[Launch]) -> tuple[str, str]:
    """The grade note and its reason for a derived verdict resting only on these typed instances."""
    seen: list[Launch] = []
    for inst in typed:
        hit = next((la for la in launches if inst.covered_by(la.instance)), None)
        if hit is None:
            return "kb-instance", (f"the instance {inst.text()} was typed by the KB; no launch trace on record shows "
                                   "the pinned dispatch launching it")
        seen.append(hit)
    first = seen[0]
    more = f" (and {len(seen) - 1} more instance(s), each seen)" if len(seen) > 1 else ""
    return "dispatch-seen", (f"the instance {typed[0].text()} was typed by the KB; the pinned dispatch launches it "
                             f"({first.input}: launch trace of {first.claim_id}){more}")


def grade_notes(deciding: Mapping[str, list[Mapping[str, Any]]], launches: list[Launch],
                snippet: Any = None) -> dict[str, tuple[str, str]]:
    """Per claim whose overall verdict is graded derived: its note, given the deciding runs' verifier and params.

    `deciding[claim]` lists the deciding runs as {"verifier", "params", "grade"}; a claim gets a note only
    when every derived-grade deciding run is a `code.constexpr` run with a KB-typed instance.
    """
    out = {}
    for cid, runs in deciding.items():
        derived = [r for r in runs if r.get("grade") == "derived"]
        if not derived:
            continue
        typed: list[Instance] = []
        for r in derived:
            t = typed_instances(r.get("params") or {}, snippet) if r.get("verifier") == "code.constexpr" else []
            if not t:
                break  # another derived check decides too: the verdict does not rest on the KB's transcription
            typed += [i for i in t if i not in typed]
        else:
            out[cid] = note(typed, launches)
    return out


def run_dicts(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Runs as plain dicts from index rows holding the run's JSON."""
    return [json.loads(r["json"]) for r in rows]
