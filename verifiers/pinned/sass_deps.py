"""toolchain.sass-deps: how a pinned unit's SASS makes a shared store wait for the global load it stores.

The unit is compiled as toolchain.sass compiles it (verifiers/pinned/sass.py: build.py's recipe, cubins cached
under `.kb/build/sass/`), and cuobjdump's listing is read with each instruction's control word: on sm_70 and
later the top 23 bits of the 128-bit instruction hold the stall count, the yield bit, the scoreboard an
instruction sets when its result arrives late (write barrier, 7 = none), the one it sets when its source
registers may be reused (read barrier) and the mask of scoreboards it waits on before it issues.

For every global load (LDG) that sets a write scoreboard, the first later shared store (STS) whose data
registers overlap the load's destination registers, in the same straight-line run of code (a branch, exit
or call ends the search), is its dependent store. Measurements over the matched kernels:

- `ldg_sts_pairs`: such (LDG, STS) pairs;
- `ldg_sts_waited`: pairs where the STS, or an instruction between the two, waits on the LDG's scoreboard
  (the store cannot issue before the load's registers arrive); `ldg_sts_unwaited`: the others;
- `ldg_sts_independent`: pairs with at least one instruction issued between the LDG and that wait (work
  that does not depend on the load goes ahead while it is outstanding);
- `hmma` / `hmma_scoreboarded`: warp MMA instructions, and those that set a write scoreboard (a later
  reader of their accumulator would wait on it; without one, ptxas orders dependent instructions by the
  stall counts of the control words: a fixed-latency result).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.pinned.sass import SassParams, split_functions, unit_sass
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:(@!?U?P[T0-9])\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)([^;]*);"
                   r"\s*/\*\s*0x[0-9a-f]{16}\s*\*/\s*\n\s*/\*\s*(0x[0-9a-f]{16})\s*\*/", re.M)
_WIDTH = {"64": 2, "128": 4}
_ENDS = ("BRA", "EXIT", "RET", "CALL", "JMP", "BRX")


@dataclass(frozen=True)
class Insn:
    """One SASS instruction with its decoded control word."""

    op: str
    operands: list[str]
    write_barrier: int  # 7: none
    wait_mask: int


def instructions(body: str) -> list[Insn]:
    """Every instruction of one kernel's cuobjdump listing, with the control word of its upper 64 bits."""
    out = []
    for m in _LINE.finditer(body):
        ctrl = int(m.group(5), 16) >> 41  # bits 105..127 of the instruction
        out.append(Insn(m.group(3), [o.strip() for o in m.group(4).split(",")], (ctrl >> 5) & 7, (ctrl >> 11) & 0x3F))
    return out


def _regs(operand: str, op: str) -> set[int]:
    m = re.fullmatch(r"R(\d+)", operand)
    if not m:
        return set()
    parts = op.split(".")
    width = max([_WIDTH.get(p, 1) for p in parts[1:]] or [1])
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def ldg_sts(insns: list[Insn]) -> dict[str, int]:
    """The (LDG, dependent STS) pairs of one kernel and how the STS waits (see the module docstring)."""
    pairs = waited = independent = 0
    for i, ld in enumerate(insns):
        if not (ld.op == "LDG" or ld.op.startswith("LDG.")) or ld.write_barrier == 7:
            continue
        dest = _regs(ld.operands[0], ld.op)
        bit = 1 << ld.write_barrier
        first_wait = None
        for j in range(i + 1, len(insns)):
            x = insns[j]
            if x.wait_mask & bit and first_wait is None:
                first_wait = j
            if (x.op == "STS" or x.op.startswith("STS.")) and dest & _regs(x.operands[-1], x.op):
                pairs += 1
                if first_wait is not None:
                    waited += 1
                    independent += first_wait > i + 1
                break
            if x.op.split(".")[0] in _ENDS:
                break
    return {"ldg_sts_pairs": pairs, "ldg_sts_waited": waited, "ldg_sts_unwaited": pairs - waited,
            "ldg_sts_independent": independent}


def measure(listing: str, names: dict[str, str], kernel_filter: str) -> tuple[dict[str, int], list[str]]:
    """Totals of ldg_sts over the kernels whose demangled name matches; also the matched mangled names."""
    funcs = split_functions(listing)
    chosen = [f for f in funcs if re.search(kernel_filter, names.get(f, f))]
    if not chosen:
        raise RuntimeError(f"no kernel matches {kernel_filter!r} among {len(funcs)}")
    total = {"kernels": len(chosen), "ldg_sts_pairs": 0, "ldg_sts_waited": 0, "ldg_sts_unwaited": 0,
             "ldg_sts_independent": 0, "hmma": 0, "hmma_scoreboarded": 0}
    for f in chosen:
        insns = instructions(funcs[f])
        if not insns and funcs[f].strip():
            raise RuntimeError(f"no instruction with a control word read in {f[:100]}: not a cuobjdump -sass listing")
        for k, v in ldg_sts(insns).items():
            total[k] += v
        mmas = [i for i in insns if i.op == "HMMA" or i.op.startswith("HMMA.")]
        total["hmma"] += len(mmas)
        total["hmma_scoreboarded"] += sum(i.write_barrier != 7 for i in mmas)
    return total, chosen


@verifier("toolchain.sass-deps", kind="pinned-code", params=SassParams,
          requires=Requirements(tools=("nvcc", "cuobjdump"), git_source=True), timeout_s=3600)
def sass_deps(p: SassParams, ctx: Context) -> Outcome:
    """Compile a pinned unit (toolchain.sass's cache); shared stores waiting on their global loads; MMA scoreboards."""
    u = unit_sass(p, ctx)
    if isinstance(u, Outcome):
        return u
    rev, manifest, listing, funcs, names = u.rev, u.manifest, u.listing, list(u.funcs), u.names
    values, chosen = measure(listing, names, p.kernel_filter)
    meas: dict[str, tuple[Any, str]] = {k: (v, "static count") for k, v in values.items()}
    log = (f"{rev.name} {manifest['unit']} @ {rev.sha} for {p.arch}; {manifest['compiler']}; "
           + ("cached" if manifest["cached"] else f"compiled in {manifest['compile_seconds']} s")
           + f"\n{len(chosen)} of {len(funcs)} kernels match {p.kernel_filter!r}\n"
           + "\n".join(f"{k} = {v}" for k, v in values.items()))
    return Outcome(measurements=meas, log=log,
                   environment={"compiler": manifest["compiler"], "gencode": manifest["gencode"], "flags": manifest["flags"],
                                "source_sha": rev.sha, "cutlass": manifest["cutlass"], "unit": manifest["unit"],
                                "cached": manifest["cached"]})
