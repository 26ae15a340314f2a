"""The large-d pin's Hopper forward as a runnable library: its hdim64/512 (LargeHeadDimV) and d128 units.

kb's other pinned builds (verifiers/pinned/build.py) are FA1 v1.0.9, FA2 v2.0.0 and FA3 hopper/ at
3669b25. The large-d pin (flash-attention `large-d-2026-08-06`, d7e4dba) carries the LargeHeadDimV forward
the large-d note describes: head_dim 64 for Q/K and head_dim_v 512, two consumer warpgroups that split the
512-wide O. This module builds three of that revision's units unchanged, for sm_90a with the pinned
hopper/setup.py's nvcc flags:

- `instantiations/flash_fwd_hdim64_512_bf16_sm90.cu` (the large-d forward),
- `instantiations/flash_fwd_hdim128_bf16_sm90.cu` (the same revision's ordinary d128 forward, to compare with),
- `flash_prepare_scheduler.cu` (referenced by the launch template's varlen branch),

plus kb's harness `harness/fa3_larged.cu` (kb_attn_abi.h, with `kb_larged_fwd` taking head_dim_v).

The revision is registered with the pinned builder (`build.REVISIONS`) when this module is imported, so
`build.build`, `build.load`, the reproducibility check and scripts/stage-pinned.sh serve it like the other
three, while build.py itself, and therefore the code hash of every check on the older builds, stays as it is.
(Moving the entry into build.py's table is a code-hash change: it waits for the next GPU re-run.)

`python -m verifiers.pinned.larged` builds it (any machine with nvcc and the clones; about 6 min per
kernel unit on one core); `--check-reproducible` rebuilds it in a second folder and compares the library hash.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from verifiers.pinned import build as pinned_build

# The harness is part of the code hash of every check that loads this library.
HASH_FILES = ["harness/kb_attn_abi.h", "harness/fa3_larged.cu"]
NAME = "fa3-larged-2026-08"
UNITS = {"fwd:bf16:64x512": "instantiations/flash_fwd_hdim64_512_bf16_sm90.cu",
         "fwd:bf16:128": "instantiations/flash_fwd_hdim128_bf16_sm90.cu",
         "fwd:scheduler:prepare": "flash_prepare_scheduler.cu"}

REVISION = pinned_build.Revision(
    name=NAME, pin="large-d-2026-08-06", sha="d7e4dba3e568106b0f1b6323b07c1272f53679b3",
    src_dir="hopper", cutlass_path="csrc/cutlass", cutlass_dirs=("include",), tree_dirs=("hopper",),
    units=UNITS, default_units=tuple(UNITS),
    gencode="arch=compute_90a,code=sm_90a",
    # hopper/setup.py's nvcc_flags at the pin (less its diagnostics: --ftemplate-backtrace-limit=0,
    # --resource-usage), plus --expt-relaxed-constexpr, which the torch extension build adds.
    flags=("-O3", "-std=c++17", "--use_fast_math", "--expt-relaxed-constexpr", "-lineinfo",
           "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED", "-DCUTLASS_ENABLE_GDC_FOR_SM90",
           "-DCUTLASS_DEBUG_TRACE_LEVEL=0", "-DNDEBUG"),
    harness="fa3_larged.cu", aten_shim=False, driver_symbols=("cuTensorMapEncodeTiled",))

pinned_build.REVISIONS.setdefault(NAME, REVISION)


def build(jobs: int = 2, log: Any = print) -> Any:
    """Build (or find cached) the library; returns its folder (libkb.so + manifest.json)."""
    return pinned_build.build(NAME, jobs=jobs, log=log)


def load() -> pinned_build.Loaded:
    """Load the current build, with `kb_larged_fwd(args, head_dim_v, stream)` typed."""
    loaded = pinned_build.load(NAME)
    fn = loaded.lib.kb_larged_fwd
    fn.argtypes = [ctypes.POINTER(pinned_build.KbAttnArgs), ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return loaded


def provenance() -> dict[str, Any]:
    """What a GPU run records about the build it used."""
    return pinned_build.provenance(NAME)


def main(argv: list[str] | None = None) -> int:
    """Command line: build the library, or check that it reproduces."""
    return pinned_build.library_main(
        argv, "python -m verifiers.pinned.larged", __doc__, NAME, build,
        lambda jobs: pinned_build.check_reproducible(NAME, jobs, log=lambda m: print(m, file=sys.stderr)))


if __name__ == "__main__":
    raise SystemExit(main())
