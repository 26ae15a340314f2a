"""code.mma-partition: which accumulator rows and columns each thread of a pinned TiledMma holds.

Which warp, warpgroup or thread owns a row of a kernel's output accumulator is not a run-time decision in
the CuTe kernels: the TiledMma type fixes it (`get_thread_slice(t).partition_C(...)`). This verifier builds,
with nvcc, a host program from the pinned headers (the same tree and cutlass submodule `code.constexpr`
materialises), the claim's type aliases, and kb's harness (harness/mma_partition.cuh), runs it on the CPU in
the sandbox, and reads every (thread, row, column) the partition yields for an M x N tile.

Measurements, with threads numbered as the TiledMma numbers them (a kernel offsets them by its producer
threads, e.g. `threadIdx.x - 128` for FA3's consumers):
- `threads`, `values_per_thread` (the most any thread holds);
- per warpgroup g (128 threads) and per warp w (32): `wg{g}_row_min`, `wg{g}_row_max`, `wg{g}_rows`,
  `wg{g}_cols` (distinct rows and columns held), `warp{w}_row_min`, `warp{w}_row_max`, `warp{w}_rows`;
- `rows_in_two_warpgroups` (rows that more than one warpgroup holds), `cells_uncovered` (tile cells no
  thread holds) and `cells_held_twice` (cells more than one thread holds).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers import trust
from verifiers.pinned.compiled import DEFAULT_CUDA_FLAGS, _anchor, _cache_root, _check_arch, _materialise, _tool_version, gitlink
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what this verifier may execute

HERE = Path(__file__).parent
HASH_FILES = ["harness/mma_partition.cuh"]


class PartitionParams(Params):
    """The pinned headers, the TiledMma type (through the claim's aliases) and the accumulator tile."""

    anchor: int = 0
    include: list[str] = Field(min_length=1)  # repo-relative headers that define the TiledMma
    dirs: list[str] = []  # repo-relative directories to materialise and put on -I (default: the anchor's folder)
    submodules: dict[str, list[str]] = {}  # gitlink path -> its folders to put on -I
    prelude: str = ""  # type aliases only ("using T = Flash_fwd_kernel_traits<...>;")
    mma: str  # the TiledMma type, e.g. T::TiledMma1
    tile_m: int = Field(gt=0, le=512)
    tile_n: int = Field(gt=0, le=1024)
    arch: str = "sm_90a"
    flags: list[str] = DEFAULT_CUDA_FLAGS

    _paths = field_validator("include", "dirs")(lambda v: [trust.check_repo_path(x) for x in v])
    _subs = field_validator("submodules")(
        lambda v: {trust.check_repo_path(k): [trust.check_repo_path(x) for x in fs] for k, fs in v.items()})
    _prelude = field_validator("prelude")(lambda v: trust.check_aliases(v))
    _mma = field_validator("mma")(lambda v: trust.check_identifier(v))
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))


def summarise(triples: list[tuple[int, int, int]], tile_m: int, tile_n: int) -> dict[str, tuple[Any, str]]:
    """Per-warpgroup and per-warp ownership figures from (thread, row, column) triples."""
    rows: dict[str, set[int]] = defaultdict(set)
    cols: dict[str, set[int]] = defaultdict(set)
    per_thread: dict[int, int] = defaultdict(int)
    holders: dict[tuple[int, int], int] = defaultdict(int)
    row_wgs: dict[int, set[int]] = defaultdict(set)
    for t, r, c in triples:
        for unit in (f"wg{t // 128}", f"warp{t // 32}"):
            rows[unit].add(r)
            cols[unit].add(c)
        per_thread[t] += 1
        holders[(r, c)] += 1
        row_wgs[r].add(t // 128)
    meas: dict[str, tuple[Any, str]] = {
        "threads": (len(per_thread), "threads holding accumulator values"),
        "values_per_thread": (max(per_thread.values(), default=0), "accumulator values, most held by a thread"),
        "rows_in_two_warpgroups": (sum(len(g) > 1 for g in row_wgs.values()), "rows held by more than one warpgroup"),
        "cells_uncovered": (tile_m * tile_n - len(holders), f"cells of the {tile_m}x{tile_n} tile no thread holds"),
        "cells_held_twice": (sum(n > 1 for n in holders.values()), "cells more than one thread holds"),
    }
    for unit in sorted(rows, key=lambda u: (u.startswith("warp"), int(u.lstrip("wgarp")))):
        meas[f"{unit}_row_min"] = (min(rows[unit]), "row")
        meas[f"{unit}_row_max"] = (max(rows[unit]), "row")
        meas[f"{unit}_rows"] = (len(rows[unit]), "distinct rows held")
        if unit.startswith("wg"):
            meas[f"{unit}_cols"] = (len(cols[unit]), "distinct columns held")
    return meas


def parse(text: str) -> list[tuple[int, int, int]]:
    """The harness's output: a `threads N` line, then one `thread row column` line per held value."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("threads "):
        raise RuntimeError(f"unexpected harness output: {text[:200]!r}")
    triples = [tuple(int(x) for x in ln.split()) for ln in lines[1:]]
    if any(len(t) != 3 for t in triples):
        raise RuntimeError("a harness line is not `thread row column`")
    return triples  # type: ignore[return-value]


@verifier("code.mma-partition", kind="pinned-code", params=PartitionParams,
          requires=Requirements(tools=("nvcc",), git_source=True), timeout_s=900)
def mma_partition(p: PartitionParams, ctx: Context) -> Outcome:
    """Every thread's accumulator rows and columns of a pinned TiledMma, from a host program nvcc builds."""
    a, clone = _anchor(p, ctx)
    root = _cache_root(ctx)
    dirs = p.dirs or [str(Path(a["path"]).parent)]
    tree = _materialise(clone, a["sha"], dirs, root)
    incs = [f"-I{tree / d}" for d in dirs]
    subs_used = {}
    for sub, folders in p.submodules.items():
        commit = gitlink(clone, a["sha"], sub)
        sub_clone = ctx.clones.get(Path(sub).name)
        if not sub_clone:
            return Outcome(verdict="skipped", reason=f"needs a local clone of {Path(sub).name} (submodule {sub} @ {commit})")
        sub_tree = _materialise(sub_clone, commit, folders, root)
        incs += [f"-I{sub_tree / f}" for f in folders]
        subs_used[sub] = commit
    harness = (HERE / "harness" / "mma_partition.cuh").read_text()
    source = ("// Generated by kb (code.mma-partition): the aliases and the harness are kb's own; the headers are "
              "the pinned ones.\n"
              # the harness first: its cute/tensor.hpp is what the pinned kernels include before their traits
              + f"{harness}\n"
              + "".join(f'#include "{h}"\n' for h in p.include)
              + f"{p.prelude}\n"
              + f"int main() {{ return kb_print_partition<{p.mma}, {p.tile_m}, {p.tile_n}>(); }}\n")
    nvcc = find_tool("nvcc") or "nvcc"
    version = _tool_version(nvcc)
    flags = [f"-arch={p.arch}", *p.flags]
    key = hashlib.sha256(json.dumps([source, flags, version, a["sha"], subs_used, dirs]).encode()).hexdigest()[:20]
    out = root / "partition" / key
    exe = out / "partition"
    cached = exe.exists()
    if not cached:
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"  # pids repeat across sandboxed workers
        src_file = out / f"partition.{tag}.cu"
        src_file.write_text(source)
        res = sandbox.run([nvcc, *flags, *incs, "-I" + str(tree), "-o", f"{exe}.{tag}", str(src_file)],
                          work=out, readable=[root], timeout=840, limits=sandbox.Limits(cpu_s=900))
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed: {res.stderr[-1200:]}")
        os.replace(f"{exe}.{tag}", exe)
        os.replace(src_file, out / "partition.cu")
    run = sandbox.run([str(exe)], readable=[out], timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"the partition program exited {run.returncode}: {run.stderr[-600:]}")
    meas = summarise(parse(run.stdout), p.tile_m, p.tile_n)
    bands = ", ".join(f"warp {w}: rows {meas[f'warp{w}_row_min'][0]}-{meas[f'warp{w}_row_max'][0]}"
                      for w in range(meas["threads"][0] // 32) if f"warp{w}_row_min" in meas)
    log = (f"{a['source']} @ {a['sha']}; include {', '.join(p.include)}; submodules {subs_used or 'none'}\n"
           f"compiler: {version}; flags: {' '.join(flags)}; build {key}{' (cached)' if cached else ''}\n"
           f"{p.mma} over {p.tile_m}x{p.tile_n}: {bands}")
    return Outcome(measurements=meas, log=log,
                   environment={"compiler": version, "flags": flags, "source_sha": a["sha"], "submodules": subs_used,
                                "sandbox": sandbox.level(), "compiled_sha256": hashlib.sha256(source.encode()).hexdigest()})
