"""FA4's Blackwell (SM100) kernels compiled here for sm_100a, without a GPU: code.fa4-sm100.

The pinned `flash_attn/cute/` tree is materialised from git at the anchor's SHA (it must be a revision
in verifiers/trust.py's EXECUTABLE_PINS), and kb's driver (fa4_child.py) runs the pinned interface's
compile-only path in the sandbox: torch's fake-tensor mode, `CUTE_DSL_ARCH=sm_100a`, and the DSL's
`CUTE_DSL_KEEP=ptx,cubin,sass`. The DSL lowers the kernel to PTX and assembles it with the ptxas it
ships; the SASS is its disassembly (nvdisasm). No GPU is touched.

Claims name a variant from VARIANTS (direction, head dims, causal, deterministic, 2-CTA allowed or
not) and a kernel role; never code. The measurements are static instruction counts: each instruction
is counted once where it stands in the kernel's code, which is not the number of times it executes
per tile or per CTA (a loop body is counted once, an unrolled loop once per copy).

Versions: the pin names nvidia-cutlass-dsl 4.6.0.dev0; PyPI's 4.8.1 is what runs here
(`pip install -e .[fa4]`). The support packages the pinned code imports are installed beside kb, not
into its environment, by `python -m verifiers.pinned.fa4_compile --install-deps` (DEPS: quack-kernels
0.5.3 is the release built against the pin's DSL 4.6.0.dev0 and still has the helpers the pin calls;
pip cannot co-install it with DSL 4.8.1, hence `--no-deps --target`). Artifacts are cached under
`.kb/build/fa4/` by (pin SHA, variant, DSL version, support packages, environment flags, driver code).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers.pinned.compiled import _anchor, _cache_root, _materialise
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

HASH_FILES = ["fa4_child.py"]

# The packages the pinned FA4 tree imports besides torch and the DSL, at fixed versions.
DEPS = ["quack-kernels==0.5.3", "apache-tvm-ffi==0.1.15.post2", "einops==0.8.2", "torch-c-dlpack-ext==0.1.5"]
ARCH = "sm_100a"

# Named variants: the knobs of one compile. `disable_2cta` sets the pinned code's FA_DISABLE_2CTA=1.
# Shapes are large enough that the pinned dispatch takes its 2-CTA path where allowed
# (seqlen_q > 2 * tile_m); a torch without CUDA reports no CUDA 12, so the forward may use 2-CTA.
_BASE = {"dtype": "bf16", "batch": 2, "seqlen": 1024, "heads": 16, "heads_kv": 16, "head_dim": 128, "head_dim_v": 128,
         "causal": False, "deterministic": False, "disable_2cta": False}
VARIANTS: dict[str, dict[str, Any]] = {
    "fwd-d128": {**_BASE, "direction": "fwd"},
    "fwd-d128-causal": {**_BASE, "direction": "fwd", "causal": True},
    "fwd-d128-1cta": {**_BASE, "direction": "fwd", "disable_2cta": True},
    "fwd-d64": {**_BASE, "direction": "fwd", "head_dim": 64, "head_dim_v": 64},
    "bwd-d128": {**_BASE, "direction": "bwd"},
    "bwd-d128-1cta": {**_BASE, "direction": "bwd", "disable_2cta": True},
    "bwd-d128-deterministic": {**_BASE, "direction": "bwd", "deterministic": True},
    "bwd-d128-causal-deterministic": {**_BASE, "direction": "bwd", "causal": True, "deterministic": True},
}
# Which kept artifact is which kernel (the DSL names files after the pinned class it compiled).
KERNELS = {
    "fwd": r"flash_fwd_sm100FlashAttentionForwardSm100|hd256_2cta_fmha_forward",
    "bwd": r"flash_bwd_sm100FlashAttentionBackwardSm100|hd256_2cta_fmha_backward",
    "bwd-preprocess": r"FlashAttentionBackwardPreprocess",
    "bwd-postprocess": r"FlashAttentionBackwardPostprocess",
}


class Fa4Params(Params):
    """A named variant, the kernel of it to read, and any extra SASS mnemonics to count."""

    anchor: int = 0  # a repository anchor (flash-attention, a path under flash_attn/cute/) at the pin to compile
    variant: Literal[tuple(VARIANTS)]  # type: ignore[valid-type]
    kernel: Literal[tuple(KERNELS)] = "fwd"  # type: ignore[valid-type]
    counts: list[str] = []  # SASS mnemonic prefixes to count as `count_<NAME>` (e.g. UBLKRED, REDG)

    _counts = field_validator("counts")(lambda v: [_mnemonic(x) for x in v])


def _mnemonic(name: str) -> str:
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*", name):
        raise ValueError(f"{name!r} is not a SASS mnemonic such as UTCHMMA or MUFU.EX2")
    return name


def deps_dir() -> Path:
    """Where the support packages are installed: $KB_FA4_DEPS, else .kb/build/fa4-deps/."""
    return Path(os.environ.get("KB_FA4_DEPS") or Path.cwd() / ".kb" / "build" / "fa4-deps")


def install_deps(target: Path | None = None) -> Path:
    """Install DEPS (no dependencies of their own) into `target`; returns it."""
    target = target or deps_dir()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), *DEPS], check=True)
    return target


def _installed(target: Path) -> dict[str, str]:
    """name -> version of what `target` holds (from the dist-info folders)."""
    out = {}
    for info in target.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        out[name.lower().replace("_", "-")] = version
    return out


# --------------------------------------------------------------------------- reading the artifacts

_SASS_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.M)
_SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)\s*;")
_TMEM_ALLOC = re.compile(r"tcgen05\.alloc\.cta_group::(\d)\.sync\.aligned\.shared::cta\.b32\s+\[[^\]]*\],\s*(%r\d+|\d+)\s*;")


def sass_mnemonics(sass: str) -> list[str]:
    """Every instruction's full mnemonic (opcode with modifiers, predicate dropped), in listing order."""
    return _SASS_INSN.findall(sass)


def count_prefix(mnemonics: list[str], prefix: str) -> int:
    """Instructions whose mnemonic is `prefix` or starts with `prefix.` (MUFU.EX2 counts for MUFU)."""
    return sum(1 for m in mnemonics if m == prefix or m.startswith(prefix + "."))


def tmem_allocations(ptx: str) -> list[tuple[int, int]]:
    """(cta_group, columns) of every tcgen05.alloc; a register operand is read from its `mov.b32` before."""
    out = []
    for m in _TMEM_ALLOC.finditer(ptx):
        group, operand = int(m.group(1)), m.group(2)
        if operand.startswith("%"):
            movs = re.findall(rf"mov\.[bus]32\s+{re.escape(operand)},\s*(\d+)\s*;", ptx[:m.start()])
            if not movs:
                raise RuntimeError(f"tcgen05.alloc column count {operand} is not a constant in the PTX")
            operand = movs[-1]
        out.append((group, int(operand)))
    return out


_UTC = re.compile(r"\b(UTCHMMA(?:\.[A-Z0-9_]+)*)\s+(tmem|gdesc)\[[^\]]*\],\s*(tmem|gdesc)\[|\bUTCBAR\b")
_REQNTID = re.compile(r"^\s*\.reqntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", re.M)


def mma_groups(sass: str) -> list[tuple[str, ...]]:
    """The tcgen05 MMA groups in listing order: each group's A-operand sources (tmem or gdesc), one per MMA.

    A group is a run of UTCHMMA instructions that no UTCBAR (tcgen05.commit) interrupts: the MMAs of one GEMM
    over its K extent, whose completion one commit signals. A group whose A sources differ is kept whole.
    """
    groups: list[tuple[str, ...]] = []
    run: list[str] = []
    for m in _UTC.finditer(sass):
        if m.group(1) is None:  # a commit closes the run
            if run:
                groups.append(tuple(run))
            run = []
        else:
            run.append(m.group(2))
    if run:
        groups.append(tuple(run))
    return groups


def reqntid(ptx: str) -> int | None:
    """Threads per CTA the kernel requires (its PTX .reqntid, the product of the given dimensions)."""
    m = _REQNTID.search(ptx)
    if not m:
        return None
    n = 1
    for g in m.groups():
        n *= int(g) if g else 1
    return n


def measure(sass: str, ptx: str, counts: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The static facts code.fa4-sm100 reports for one kernel's SASS and PTX."""
    ms = sass_mnemonics(sass)
    c = {p: count_prefix(ms, p) for p in ("UTCHMMA", "UTCHMMA.2CTA", "UTCBAR", "LDTM", "STTM", "MUFU.EX2", "FFMA2",
                                           "FADD2.RM", "UBLKRED", "UTMAREDG", "REDG", "RED", "ATOMG", "ATOM", "ATOMS",
                                           "MEMBAR", "FENCE.VIEW.ASYNC", "USETMAXREG")}
    regs = [(k, int(v)) for k, v in _SETMAXNREG.findall(ptx)]
    allocs = tmem_allocations(ptx)
    groups = mma_groups(sass)
    # ex2_emulation_2 rounds a pair of inputs down with one packed FADD2.RM (add.rm.f32x2); the pinned
    # tree uses that rounding nowhere else, so each FADD2.RM stands for two emulated exp2.
    emulated = 2 * c["FADD2.RM"]
    total_ex2 = emulated + c["MUFU.EX2"]
    out: dict[str, Any] = {
        "instructions": len(ms),
        "setmaxnreg_inc": sorted({v for k, v in regs if k == "inc"}),
        "setmaxnreg_dec": sorted({v for k, v in regs if k == "dec"}),
        "regs_max": max((v for _, v in regs), default=None),
        "regs_min": min((v for _, v in regs), default=None),
        "tmem_alloc_columns": max((n for _, n in allocs), default=0),
        "tmem_alloc_sites": len(allocs),
        "cta_group": max((g for g, _ in allocs), default=1 if c["UTCHMMA"] else 0),
        "tcgen05_mma": c["UTCHMMA"],
        "tcgen05_mma_2cta": c["UTCHMMA.2CTA"],
        "tcgen05_mma_1cta": c["UTCHMMA"] - c["UTCHMMA.2CTA"],
        # The A operand is the first: `UTCHMMA tmem[..], gdesc[..], ...` reads A from TMEM, `gdesc[..]` from SMEM.
        "tcgen05_mma_a_tmem": len(re.findall(r"\bUTCHMMA(?:\.[A-Z0-9_]+)*\s+tmem\[", sass)),
        "tcgen05_mma_a_smem": len(re.findall(r"\bUTCHMMA(?:\.[A-Z0-9_]+)*\s+gdesc\[", sass)),
        # B is the second operand: tcgen05.mma reads it from SMEM (gdesc) always; a tmem B would be news.
        "tcgen05_mma_b_tmem": len(re.findall(r"\bUTCHMMA(?:\.[A-Z0-9_]+)*\s+(?:tmem|gdesc)\[[^\]]*\],\s*tmem\[", sass)),
        "tcgen05_gemm_groups": len(groups),
        "tcgen05_gemm_groups_a_tmem": sum(1 for g in groups if set(g) == {"tmem"}),
        "tcgen05_gemm_groups_a_mixed": sum(1 for g in groups if len(set(g)) > 1),
        "tcgen05_gemm_groups_a_tmem_share": round(sum(1 for g in groups if set(g) == {"tmem"}) / len(groups), 4)
        if groups else 0.0,
        "ptx_reqntid": reqntid(ptx),
        "tcgen05_commit": c["UTCBAR"],
        "tcgen05_ld": c["LDTM"],
        "tcgen05_st": c["STTM"],
        "mufu_ex2": c["MUFU.EX2"],
        "ffma2": c["FFMA2"],
        "ex2_emulated": emulated,
        "ex2_emulated_fraction": round(emulated / total_ex2, 4) if total_ex2 else 0.0,
        "bulk_reduce": c["UBLKRED"] + c["UTMAREDG"],
        "global_atomics": c["REDG"] + c["RED"] + c["ATOMG"] + c["ATOM"],
        "shared_atomics": c["ATOMS"],
        "membar": c["MEMBAR"],
        "fence_async": c["FENCE.VIEW.ASYNC"],
        "ptx_fence_proxy_async": len(re.findall(r"^\s*(?:@!?%p\d+\s+)?fence\.proxy\.async", ptx, re.M)),
        "ptx_acquire_loads": len(re.findall(r"\bld(?:\.global)?\.acquire\.", ptx)),
        "ptx_release_ops": len(re.findall(r"\b(?:st|red|atom)(?:\.global)?\.release\.", ptx)),
    }
    for p in counts:
        out[f"count_{p}"] = count_prefix(ms, p)
    return out


# --------------------------------------------------------------------------- compiling


def _dsl_version() -> str:
    return importlib.metadata.version("nvidia-cutlass-dsl")


def compile_variant(clone: str, sha: str, variant: str, root: Path, sm_count: int) -> tuple[Path, dict[str, Any]]:
    """The variant's kept artifacts (compiled once per key); returns (folder, manifest).

    `sm_count` is what the host-side grid sizing is told (there is no device to ask).
    """
    knobs = {**VARIANTS[variant], "sm_count": sm_count}
    root, deps = root.resolve(), deps_dir().resolve()  # the sandboxed child runs in another folder
    have = _installed(deps) if deps.is_dir() else {}
    want = {d.split("==")[0]: d.split("==")[1] for d in DEPS}
    if any(have.get(n) != v for n, v in want.items()):
        raise FileNotFoundError(f"FA4 support packages missing or at other versions in {deps} (have {have}): "
                                "python -m verifiers.pinned.fa4_compile --install-deps")
    child = Path(__file__).with_name("fa4_child.py")
    env = {"CUTE_DSL_ARCH": ARCH, "FLASH_ATTENTION_ARCH": ARCH, "CUTE_DSL_KEEP": "ptx,cubin,sass",
           "FA_DISABLE_2CTA": "1" if knobs["disable_2cta"] else "0"}
    key = hashlib.sha256(json.dumps([sha, variant, knobs, _dsl_version(), want, env,
                                     hashlib.sha256(child.read_bytes()).hexdigest()]).encode()).hexdigest()[:20]
    out = root / "fa4" / key
    if (out / "manifest.json").exists():
        return out, {**json.loads((out / "manifest.json").read_text()), "cached": True}
    tree = _materialise(clone, sha, ["flash_attn/cute"], root)
    work = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=root))
    dump = work / "dump"
    dump.mkdir()
    start = time.perf_counter()
    res = sandbox.run([sys.executable, "-s", str(child)], input=json.dumps(knobs), work=work,
                      readable=[root, deps, child.parent], timeout=1500, limits=sandbox.Limits(cpu_s=1500, address_space=None),
                      env={**env, "CUTE_DSL_DUMP_DIR": str(dump), "CUTE_DSL_CACHE_DIR": str(work / "cache"),
                           "PYTHONPATH": os.pathsep.join([str(tree), str(deps)])})
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"FA4 compile of {variant} failed (exit {res.returncode}): {res.stderr[-1500:]}")
    files = sorted(p.name for p in dump.iterdir() if p.suffix in (".sass", ".ptx", ".cubin"))
    manifest = {"sha": sha, "variant": variant, "knobs": knobs, "arch": ARCH, "dsl": _dsl_version(), "deps": want,
                "env": env, "files": files, "child": json.loads(res.stdout.strip().splitlines()[-1]),
                "compile_seconds": round(seconds, 1)}
    (dump / "manifest.json").write_text(json.dumps(manifest, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(dump, out)
    except OSError:  # another lane compiled the same key first
        if not (out / "manifest.json").exists():
            raise
    shutil.rmtree(work, ignore_errors=True)
    return out, {**manifest, "cached": False}


def sm_count(ctx: Context) -> int:
    """B200's SM count from the hardware sources (sm_100a is the B200/GB200 target)."""
    hw = ctx.hardware.get("B200") or {}
    if "sm_count" not in hw:
        raise ValueError("no B200.sm_count in sources/ (hardware constants)")
    return int(hw["sm_count"])


def res_usage(cubin: Path) -> dict[str, int]:
    """REG/SHARED/STACK of the cubin's first function, as cuobjdump -res-usage reports them."""
    tool = find_tool("cuobjdump")
    if not tool:
        return {}
    text = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", text)
    return {"registers": int(m.group(1)), "stack_bytes": int(m.group(2)), "static_smem": int(m.group(3))} if m else {}


@verifier("code.fa4-sm100", kind="pinned-code", params=Fa4Params,
          requires=Requirements(git_source=True, packages=("cutlass", "torch"), tools=("cuobjdump",)), timeout_s=1800)
def fa4_sm100(p: Fa4Params, ctx: Context) -> Outcome:
    """Compile a pinned FA4 SM100 variant for sm_100a on the CPU; static counts from its SASS and PTX."""
    a, clone = _anchor(p, ctx)
    if not a["path"].startswith("flash_attn/cute/"):
        raise ValueError(f"anchor {p.anchor} cites {a['path']}, not a file of the FA4 tree flash_attn/cute/")
    folder, manifest = compile_variant(clone, a["sha"], p.variant, _cache_root(ctx), sm_count(ctx))
    pattern = re.compile(KERNELS[p.kernel])
    chosen = sorted({Path(f).name.split(".")[0] for f in manifest["files"] if pattern.search(f)})
    if not chosen:
        raise RuntimeError(f"no kept kernel matches {p.kernel!r} among {manifest['files']}")
    sass = "\n".join((folder / f).read_text() for f in manifest["files"] if f.endswith(".sass") and pattern.search(f))
    ptx = "\n".join((folder / f).read_text() for f in manifest["files"] if f.endswith(".ptx") and pattern.search(f))
    if not sass or not ptx:
        raise RuntimeError(f"kernel {p.kernel!r} has no kept SASS or PTX in {folder}")
    values = measure(sass, ptx, p.counts)
    cubins = [folder / f for f in manifest["files"] if f.endswith(".cubin") and pattern.search(f)]
    values.update(res_usage(cubins[0]) if len(cubins) == 1 else {})
    values["kernels"] = len(cubins)
    meas = {k: (v, "static count" if isinstance(v, int) and k not in ("regs_max", "regs_min", "tmem_alloc_columns",
                                                                     "cta_group", "registers", "stack_bytes", "ptx_reqntid",
                                                                     "tcgen05_gemm_groups_a_tmem_share",
                                                                     "static_smem", "kernels") else "")
            for k, v in values.items()}
    log = (f"{a['source']} flash_attn/cute @ {a['sha']}; variant {p.variant} {manifest['knobs']}; kernel {p.kernel}\n"
           f"nvidia-cutlass-dsl {manifest['dsl']} for {ARCH}; support {manifest['deps']}; "
           + ("cached" if manifest["cached"] else f"compiled in {manifest['compile_seconds']} s") + "\n"
           "Counts are static: each instruction counted once where it stands in the kernel's code, not per tile.\n"
           + "\n".join(f"{k} = {v}" for k, v in values.items()))
    return Outcome(measurements=meas, log=log,
                   environment={"dsl": manifest["dsl"], "arch": ARCH, "deps": manifest["deps"], "source_sha": a["sha"],
                                "variant": p.variant, "knobs": manifest["knobs"], "sandbox": sandbox.level(),
                                "compile_seconds": manifest["compile_seconds"], "cached": manifest["cached"]})


if __name__ == "__main__":
    if sys.argv[1:] == ["--install-deps"]:
        print(install_deps())
    else:
        raise SystemExit("usage: python -m verifiers.pinned.fa4_compile --install-deps")
