"""Local memory inside a kernel's loops, from the SASS of a pinned unit built here: toolchain.sass-loop-local.

toolchain.sass counts spills (STL/LDL) over a whole kernel, which cannot say whether a value the source keeps
in registers for a whole loop (a running statistic, an accumulator) lives in local memory across iterations,
or whether the spills sit in the prologue and epilogue. This verifier reads the same listing (the unit compiled
unchanged by toolchain.sass's cache) and finds each kernel's loops as backward branches (a BRA whose target
lies at a lower address: the loop is the address range from the target to the branch). Inside a loop it
counts local accesses, and finds round trips: a local slot loaded and stored again within one loop (the
same address expression: [R1+0x8] for a spill slot, [R25] for a dynamically indexed array). A round trip
whose stored register is written by floating-point arithmetic between the load and the store (FFMA, FADD,
FMUL, FMNMX, MUFU, HMMA) carries a computed value across iterations through local memory.

Static facts about the code, found by address ranges in the listing: a loop's range can contain code that
runs on some iterations only, and the analysis does not say which source variable a slot holds; the log
lists each round trip with its registers and the instructions that update it.
"""

from __future__ import annotations

import re
from typing import Any

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.pinned import sass
from verifiers.pinned.sass import SassParams
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRA = re.compile(r"(?:^|\s)BRA(?:\.\w+)*\s+(?:`\()?.*?(0x[0-9a-f]+)")
_LDL = re.compile(r"^(?:@!?U?P\w+\s+)?LDL(?:\.\w+)*\s+(R\d+),\s*\[([^\]]+)\]")
_STL = re.compile(r"^(?:@!?U?P\w+\s+)?STL(?:\.\w+)*\s+\[([^\]]+)\],\s*(R\d+)")
FP_WRITERS = ("FFMA", "FADD", "FMUL", "FMNMX", "MUFU", "HMMA")


def instructions(listing: str) -> list[tuple[int, str]]:
    """(address, instruction text) for one function's cuobjdump -sass listing."""
    return [(int(a, 16), t.strip()) for a, t in _INS.findall(listing)]


def loops(ins: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """Address ranges (target, branch) of the backward branches."""
    out = []
    for addr, text in ins:
        m = _BRA.search(text)
        if m and int(m.group(1), 16) < addr:
            out.append((int(m.group(1), 16), addr))
    return out


def _dest(text: str) -> tuple[str, str] | None:
    """(mnemonic, destination register) of an instruction that writes a general register first."""
    t = re.sub(r"^@!?U?P\w+\s+", "", text)
    m = re.match(r"([A-Z][A-Z0-9_.]*)\s+(R\d+)\b", t)
    return (m.group(1), m.group(2)) if m else None


def loop_local(ins: list[tuple[int, str]]) -> dict[str, Any]:
    """Local accesses inside loops, and the round trips (a slot loaded and stored again within one loop)."""
    ranges = loops(ins)
    inside = [(a, t) for a, t in ins if any(lo <= a <= hi for lo, hi in ranges) and re.search(r"\b(LDL|STL)\b", t)]
    trips = []
    for lo, hi in ranges:
        body = [(a, t) for a, t in ins if lo <= a <= hi]
        for i, (a1, t1) in enumerate(body):
            ld = _LDL.match(t1)
            if not ld:
                continue
            reg_in, slot = ld.group(1), ld.group(2).replace(" ", "")
            for a2, t2 in body[i + 1:]:
                st = _STL.match(t2)
                if st and st.group(1).replace(" ", "") == slot:
                    reg_out = st.group(2)
                    writers = [d[0] for a, t in body if a1 < a < a2 and (d := _dest(t)) and d[1] == reg_out]
                    trips.append({"slot": slot, "load": hex(a1), "store": hex(a2), "loaded": reg_in,
                                  "stored": reg_out, "writers": writers,
                                  "fp_updated": any(w.split(".")[0] in FP_WRITERS for w in writers)})
                    break
    uniq = {(t["slot"], t["load"], t["store"]): t for t in trips}  # nested loops see a round trip twice
    trips = list(uniq.values())
    return {"loops": len(ranges), "local_in_loops": len(inside), "round_trips": trips}


@verifier("toolchain.sass-loop-local", kind="pinned-code", params=SassParams,
          requires=Requirements(tools=("nvcc", "cuobjdump"), git_source=True), timeout_s=3600)
def sass_loop_local(p: SassParams, ctx: Context) -> Outcome:
    """Local memory inside the loops of a pinned unit's kernels: accesses, and values carried across iterations."""
    u = sass.unit_sass(p, ctx)
    if isinstance(u, Outcome):
        return u
    chosen = [f for f in u.funcs if re.search(p.kernel_filter, u.names.get(f, f))]
    if not chosen:
        raise RuntimeError(f"no kernel matches {p.kernel_filter!r} among {len(u.funcs)} in {u.manifest['unit']}")
    per = {f: loop_local(instructions(u.funcs[f])) for f in chosen}
    without_loops = [f for f in chosen if not per[f]["loops"]]
    if without_loops:
        raise RuntimeError(f"no backward branch found in {u.names.get(without_loops[0], without_loops[0])[:120]}: "
                           "the listing does not parse as expected")
    fp_trips = {f: [t for t in r["round_trips"] if t["fp_updated"]] for f, r in per.items()}
    meas: dict[str, tuple[Any, str]] = {
        "kernels": (len(chosen), "kernels matched"),
        "kernels_with_local_in_loops": (sum(1 for r in per.values() if r["local_in_loops"]), "kernels"),
        "local_in_loops": (sum(r["local_in_loops"] for r in per.values()), "static LDL/STL inside loop ranges"),
        "round_trips": (sum(len(r["round_trips"]) for r in per.values()), "slots loaded and stored within a loop"),
        "fp_round_trips": (sum(len(v) for v in fp_trips.values()),
                           "round trips whose stored value floating-point arithmetic updated in between"),
        "kernels_with_fp_round_trip": (sum(1 for v in fp_trips.values() if v), "kernels"),
    }
    lines = [f"{u.rev.name} {u.manifest['unit']} @ {u.rev.sha} for {p.arch}; {u.manifest['compiler']}; static analysis"]
    for f in chosen:
        r = per[f]
        lines.append(f"{u.names.get(f, f)[:160]}\n  loops {r['loops']}, local in loops {r['local_in_loops']}")
        lines += [f"  slot [{t['slot']}] LDL {t['loaded']} at {t['load']} -> STL {t['stored']} at {t['store']}; "
                  f"written by {t['writers'] or 'nothing'}" for t in r["round_trips"]]
    return Outcome(measurements=meas, log="\n".join(lines)[-20000:],
                   environment={"compiler": u.manifest["compiler"], "unit": u.manifest["unit"],
                                "source_sha": u.rev.sha, "cutlass": u.manifest["cutlass"]})
