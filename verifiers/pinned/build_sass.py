"""code.build-sass: the SASS and ptxas report of kb's build of a pin, read where the build is.

toolchain.sass compiles a pinned unit again for the architecture a claim names; this verifier reads the
library `python -m verifiers.pinned.build` made (`.kb/build/pinned/<rev>/<key>/libkb.so`, the binary the
GPU checks of `impl: <rev>` run) with cuobjdump, and the ptxas report its manifest kept for every kernel.
So it runs, on a CPU, wherever that build is: on the H200 host right after its builds, or here once one is
carried back. Without a build it is skipped with the command that makes one.

Measurements are static (an instruction once where it stands in a kernel's code, not per execution),
totals over the kernels `kernel_filter` matches:

- `local_loads` / `local_stores`: LDL / STL instructions (per-thread local memory: spills, stack arrays);
- `spill_stores` / `spill_loads` / `stack_bytes`: the largest of ptxas's figures over those kernels;
- `hgmma`: HGMMA (WGMMA) instructions; `hgmma_accumulate`: those whose accumulator input is the register
  they write (`HGMMA ... R24, ..., R24`: the accumulator stays in registers across the chain),
  `hgmma_zero_init`: those that start from zero (`RZ`), `hgmma_a_registers` / `hgmma_a_smem`: the A
  operand from registers (`R..`, the RS form) or from a shared-memory descriptor (`gdesc[..]`);
- `mufu_ex2_in_flight`: MUFU.EX2 placed, in code order, while WGMMA commit groups are outstanding (after
  an HGMMA, not yet waited for by `WARPGROUP.DEPBAR.LE gsb0, N`): exponentials the code issues while
  Tensor Core work is still running;
- `accumulator_local_stores` / `_loads`: STL / LDL whose data registers overlap an HGMMA accumulator
  range (conservative: 0 means no accumulator register is ever spilled);
- `registers` / `registers_min` (cuobjdump -res-usage), `count_<NAME>` for SASS mnemonic prefixes;
- with `live_ranges`: `max_live_registers` / `max_live_registers_min`, the largest number of general
  registers live at any instruction of a kernel (`nvdisasm --life-range-mode count` on the cubins
  `cuobjdump -xelf` takes out of the library), the largest and the smallest of those over the kernels.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from kb.fsutil import atomic_write_text
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify.hw import find_tool
from verifiers.pinned import build as pinned_build
from verifiers.pinned.fa4_compile import count_prefix, sass_mnemonics
from verifiers.pinned.sass import _mnemonic, registers, split_functions


class BuildSassParams(Params):
    """Which pinned build, which of its kernels, which mnemonics to count."""

    revision: Literal[tuple(pinned_build.REVISIONS)]  # type: ignore[valid-type]
    kernel_filter: str = ""  # regex over demangled kernel names; every kernel of the build when empty
    counts: list[str] = []  # SASS mnemonic prefixes, counted as `count_<NAME>`
    live_ranges: bool = False  # also read nvdisasm's live-register counts (max_live_registers)

    _counts = field_validator("counts")(lambda v: [_mnemonic(x) for x in v])

    @field_validator("kernel_filter")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:  # a bad pattern is bad input, reported at validation with the field
            raise ValueError(f"kernel_filter {v!r} is not a regular expression: {e}") from None
        return v


# One SASS instruction line: address, optional predicate, mnemonic (HGMMA shapes carry a lowercase x),
# operands up to the `;`.
_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)([^;]*);", re.M)
_REG = re.compile(r"R\d+|RZ")


def hgmma_forms(body: str) -> dict[str, int]:
    """Operand forms of the HGMMA instructions in one kernel's listing (see the module docstring)."""
    out = {"hgmma": 0, "hgmma_accumulate": 0, "hgmma_zero_init": 0, "hgmma_a_registers": 0, "hgmma_a_smem": 0}
    for m in _INSN.finditer(body):
        if not (m.group(1) == "HGMMA" or m.group(1).startswith("HGMMA.")):
            continue
        ops = [o.strip() for o in m.group(2).split(",")]
        out["hgmma"] += 1
        dest, a = ops[0], ops[1] if len(ops) > 1 else ""
        # SS form `D, gdesc[A,B], C`, RS form `D, A-regs, gdesc[B], C`: the accumulator input C is the operand
        # right after the descriptor (RZ: start from zero; `!UPT` / `gsb0` follow it).
        desc = next((i for i, o in enumerate(ops) if o.startswith("gdesc")), None)
        acc = ops[desc + 1] if desc is not None and desc + 1 < len(ops) else ""
        out["hgmma_accumulate"] += acc == dest and dest != "RZ"
        out["hgmma_zero_init"] += acc == "RZ"
        out["hgmma_a_smem"] += a.startswith("gdesc")
        out["hgmma_a_registers"] += bool(_REG.fullmatch(a))
    return out


def mufu_in_flight(body: str) -> int:
    """MUFU.EX2 instructions placed, in code order, while WGMMA groups are outstanding.

    An HGMMA carrying `gsb0` closes a commit group; `WARPGROUP.DEPBAR.LE gsb0, N` waits until at most N
    groups are outstanding (FA3's main loop waits with N = 1: the QK^T group done, the PV group still
    running). This follows the listing, not control flow: a static view of what the code can overlap.
    """
    pending, open_group, n = 0, False, 0
    for m in _INSN.finditer(body):
        op, ops = m.group(1), m.group(2)
        if op == "HGMMA" or op.startswith("HGMMA."):
            open_group = True
            if re.search(r"\bgsb0\b", ops):
                pending, open_group = pending + 1, False
        elif op.startswith("WARPGROUP.DEPBAR"):
            w = re.search(r"gsb0,\s*(0x[0-9a-f]+|\d+)", ops)
            pending = min(pending, int(w.group(1), 0)) if w else 0
        elif op == "MUFU.EX2" and (pending or open_group):
            n += 1
    return n


_SHAPE = re.compile(r"HGMMA\.64x(\d+)x\d+\.(F32|F16)")
_WIDTH = {"64": 2, "128": 4}


def accumulator_spills(body: str) -> tuple[int, int]:
    """(STL, LDL) instructions whose data registers overlap an HGMMA accumulator range of the same kernel.

    An m64nNk16 HGMMA with FP32 accumulators holds N/2 registers per thread from its destination (N/4 for
    FP16). A register of such a range stored to or loaded from local memory anywhere in the kernel counts,
    whether or not it held the accumulator at that point: the count can only overstate a spill, never
    miss one, so 0 means no accumulator register is ever spilled.
    """
    ranges: set[int] = set()
    for m in _INSN.finditer(body):
        if (sh := _SHAPE.match(m.group(1))) and (d := re.match(r"\s*R(\d+)", m.group(2))):
            base, n = int(d.group(1)), int(sh.group(1)) // (2 if sh.group(2) == "F32" else 4)
            ranges.update(range(base, base + n))
    stores = loads = 0
    for m in _INSN.finditer(body):
        op = m.group(1)
        if not (op.startswith(("STL", "LDL")) and (op[:3] == op or op[3] == ".")):
            continue
        width = _WIDTH.get(op.split(".")[1], 1) if "." in op and op.split(".")[1] in _WIDTH else 1
        regs = [o.strip() for o in m.group(2).split(",")]
        data = regs[-1] if op.startswith("STL") else regs[0]
        if not (r := re.fullmatch(r"R(\d+)", data)):
            continue
        if ranges.intersection(range(int(r.group(1)), int(r.group(1)) + width)):
            stores += op.startswith("STL")
            loads += op.startswith("LDL")
    return stores, loads


_LR_FUNC = re.compile(r"^\s*\.text\.(\S+):\s*(?://.*)?$")
_LR_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+\S.*//\s*\|\s*(\d*)\s*\|")


def live_registers(text: str) -> dict[str, int]:
    """nvdisasm `-lrm count` output: mangled function name -> most general registers live at one instruction."""
    out: dict[str, int] = {}
    cur: str | None = None
    for line in text.splitlines():
        if m := _LR_FUNC.match(line):
            cur = m.group(1)
            out[cur] = 0
        elif cur is not None and (m := _LR_INSN.search(line)) and m.group(1):
            out[cur] = max(out[cur], int(m.group(1)))
    return out


def measure(listing: str, res_usage: str, ptxas: dict[str, dict[str, Any]], names: dict[str, str],
            kernel_filter: str, counts: list[str], live: dict[str, int] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The measurements over the kernels whose demangled name matches; also the matched mangled names.

    `ptxas` is the build manifest's report (mangled name -> registers, spills, stack); a matched kernel
    it lacks is an error, since spill figures would otherwise read as zero. `live` (live_registers'
    answer), when given, must cover every matched kernel too.
    """
    funcs = split_functions(listing)
    chosen = [f for f in funcs if re.search(kernel_filter, names.get(f, f))]
    if not chosen:
        raise RuntimeError(f"no kernel matches {kernel_filter!r} among {len(funcs)} in the build")
    missing = [f for f in chosen if f not in ptxas]
    if missing:
        raise RuntimeError(f"the build's ptxas report lacks {len(missing)} matched kernel(s), e.g. {missing[0][:120]}")
    usage = registers(res_usage)
    ms = [m for f in chosen for m in sass_mnemonics(funcs[f])]
    values: dict[str, Any] = {
        "kernels": len(chosen), "instructions": len(ms),
        "registers": max(usage.get(f, 0) for f in chosen), "registers_min": min(usage.get(f, 0) for f in chosen),
        "local_loads": count_prefix(ms, "LDL"), "local_stores": count_prefix(ms, "STL"),
        "spill_stores": max(int(ptxas[f].get("spill_stores", 0)) for f in chosen),
        "spill_loads": max(int(ptxas[f].get("spill_loads", 0)) for f in chosen),
        "stack_bytes": max(int(ptxas[f].get("stack", 0)) for f in chosen),
        "mufu_ex2_in_flight": sum(mufu_in_flight(funcs[f]) for f in chosen),
    }
    for f in chosen:
        for k, v in hgmma_forms(funcs[f]).items():
            values[k] = values.get(k, 0) + v
    acc = [accumulator_spills(funcs[f]) for f in chosen]
    values["accumulator_local_stores"] = sum(a for a, _ in acc)
    values["accumulator_local_loads"] = sum(b for _, b in acc)
    for c in counts:
        values[f"count_{c}"] = count_prefix(ms, c)
    if live is not None:
        if lacking := [f for f in chosen if f not in live]:
            raise RuntimeError(f"nvdisasm's live ranges lack {len(lacking)} matched kernel(s), e.g. {lacking[0][:120]}")
        values["max_live_registers"] = max(live[f] for f in chosen)
        values["max_live_registers_min"] = min(live[f] for f in chosen)
    return values, chosen


def find_build(name: str) -> tuple[Path, dict[str, Any]]:
    """The current build folder of revision `name` and its manifest (no library is loaded).

    FileNotFoundError when there is none here; RuntimeError when it was made from another SHA or harness.
    """
    rev = pinned_build.revision(name)
    folder = pinned_build.build_root() / name
    cur = folder / "current"
    if not cur.exists():
        raise FileNotFoundError(f"no build of {name} under {folder}: run `python -m verifiers.pinned.build --rev {name}`")
    path = folder / cur.read_text().strip()
    manifest = json.loads((path / "manifest.json").read_text())
    if manifest.get("source_sha") != rev.sha:
        raise RuntimeError(f"{path}: built from {manifest.get('source_sha')}, not the pin {rev.sha}")
    if manifest.get("harness", {}).get("sha256") != pinned_build.harness_digest(rev):
        raise RuntimeError(f"{path}: built with another harness than verifiers/pinned/harness/{rev.harness}; rebuild")
    if not (path / "libkb.so").exists():
        raise FileNotFoundError(f"{path} has no libkb.so")
    return path, manifest


def read_library(lib: Path) -> tuple[str, str]:
    """cuobjdump's -sass listing and -res-usage report of a library, kept beside it by the library's hash.

    Several checks read one build: the listing (tens of MB for FA3) is made once per library content;
    where the build folder is not writable each check makes its own.
    """
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()[:16]
    cache = lib.parent / f"cuobjdump-{digest}.json"
    if cache.exists():
        got = json.loads(cache.read_text())
        return got["sass"], got["res_usage"]
    tool = find_tool("cuobjdump") or "cuobjdump"
    listing = subprocess.run([tool, "-sass", str(lib)], capture_output=True, text=True, timeout=240)
    if listing.returncode != 0 or "Function :" not in listing.stdout:
        raise RuntimeError(f"cuobjdump -sass {lib} failed: {listing.stderr[-600:]}")
    usage = subprocess.run([tool, "-res-usage", str(lib)], capture_output=True, text=True, timeout=240)
    if usage.returncode != 0:
        raise RuntimeError(f"cuobjdump -res-usage {lib} failed: {usage.stderr[-600:]}")
    try:
        atomic_write_text(cache, json.dumps({"sass": listing.stdout, "res_usage": usage.stdout}))
    except OSError:
        pass  # a read-only build folder: nothing kept, the answer is the same
    return listing.stdout, usage.stdout


def read_live_ranges(lib: Path) -> dict[str, int]:
    """Most live general registers per kernel of a library's cubins, kept beside it by the library's hash."""
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()[:16]
    cache = lib.parent / f"live-{digest}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    cuobjdump, nvdisasm = find_tool("cuobjdump") or "cuobjdump", find_tool("nvdisasm") or "nvdisasm"
    out: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="kb-xelf-") as tmp:
        res = subprocess.run([cuobjdump, "-xelf", "all", str(lib)], capture_output=True, text=True, timeout=240, cwd=tmp)
        cubins = sorted(Path(tmp).glob("*.cubin"))
        if res.returncode != 0 or not cubins:
            raise RuntimeError(f"cuobjdump -xelf all {lib} gave no cubin: {res.stderr[-600:]}")
        for cubin in cubins:
            lr = subprocess.run([nvdisasm, "--life-range-mode", "count", "-c", str(cubin)], capture_output=True,
                                text=True, timeout=600)
            if lr.returncode != 0:
                raise RuntimeError(f"nvdisasm --life-range-mode count {cubin.name} failed: {lr.stderr[-600:]}")
            out.update(live_registers(lr.stdout))
    try:
        atomic_write_text(cache, json.dumps(out))
    except OSError:
        pass
    return out


def _demangle(names: list[str]) -> dict[str, str]:
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, timeout=120).stdout
    return dict(zip(names, out.splitlines(), strict=False))


_STATIC = ("max_live_registers", "max_live_registers_min", "instructions", "local_loads", "local_stores",
           "mufu_ex2_in_flight", "accumulator_local_stores", "accumulator_local_loads")


@verifier("code.build-sass", kind="pinned-code", params=BuildSassParams,
          requires=Requirements(tools=("cuobjdump", "nvdisasm")), timeout_s=600)
def build_sass(p: BuildSassParams, ctx: Context) -> Outcome:
    """Static SASS counts, HGMMA operand forms and ptxas spills of kb's build of a pin (cuobjdump + manifest)."""
    try:
        path, manifest = find_build(p.revision)
    except (FileNotFoundError, RuntimeError, KeyError) as e:
        return Outcome(verdict="skipped", reason=f"needs kb's build of {p.revision} here: {e}")
    listing, usage = read_library(path / "libkb.so")
    funcs = list(split_functions(listing))
    names = _demangle(funcs)
    live = read_live_ranges(path / "libkb.so") if p.live_ranges else None
    values, chosen = measure(listing, usage, manifest.get("ptxas", {}), names, p.kernel_filter, p.counts, live)
    meas = {k: (v, "static count" if k in _STATIC or k.startswith(("count_", "hgmma")) else "") for k, v in values.items()}
    per = registers(usage)
    log = (f"{p.revision} build {manifest.get('key')} ({manifest['source_sha'][:12]}, {manifest.get('gencode')}, "
           f"{manifest.get('compiler')}); {len(chosen)} of {len(funcs)} kernels match {p.kernel_filter!r}; counts are "
           "static\n" + "\n".join(f"{k} = {v}" for k, v in values.items()) + "\n"
           + "\n".join(f"  {per.get(f, '?')} regs, spill {manifest['ptxas'][f].get('spill_stores', '?')}/"
                       f"{manifest['ptxas'][f].get('spill_loads', '?')} B  {names.get(f, f)[:160]}" for f in chosen[:16]))
    return Outcome(measurements=meas, log=log,
                   environment={"build_key": manifest.get("key"), "library_sha256": manifest.get("library_sha256"),
                                "source_sha": manifest["source_sha"], "gencode": manifest.get("gencode"),
                                "compiler": manifest.get("compiler"), "flags": manifest.get("flags")})
