"""The child interpreter that compiles one pinned FA4 SM100 variant for sm_100a without a GPU (code.fa4-sm100).

kb's own driver, run in the sandbox by verifiers/pinned/fa4_compile.py with the pinned `flash_attn/cute/`
tree and the FA4 support packages (quack-kernels and friends, verifiers/pinned/fa4_compile.py DEPS) on
PYTHONPATH. It reads one JSON task on stdin: the variant's knobs (direction, head dims, causal,
deterministic, shape). The environment (CUTE_DSL_ARCH, FLASH_ATTENTION_ARCH, CUTE_DSL_KEEP,
CUTE_DSL_DUMP_DIR, FA_DISABLE_2CTA) is set by the parent before this process starts, because the
pinned modules read it at import.

The compile-only path is the one the pinned interface documents: torch's fake-tensor mode, tensors
on a fake `cuda` device, the pinned `_flash_attn_fwd` / `_flash_attn_bwd` entry points, and the DSL
keeping PTX, cubin and SASS of every kernel it compiles. autograd is not used (a CPU-only torch
cannot record a CUDA tensor's gradient); the backward is handed fake `out` and `lse` directly.

Compatibility shim (kb's, not a patch of pinned files): `quack/__init__.py` imports its autotuner,
which imports triton, absent from a CPU-only torch. The pinned code only imports quack submodules,
so `quack` is registered as a bare package over the installed folder and its `__init__` is not run.
The deterministic backward converts its semaphore tensors through torch's own `__dlpack__`, which asks
`torch.cuda.current_device()`; a CPU-only torch raises there, so the child answers device 0, the device
of every fake tensor it makes (the conversion itself, and the layout it yields, are the pinned code's).
The persistent tile scheduler sizes its host-side grid from `cutlass.utils.HardwareInfo`, which asks the
CUDA driver; there is none here, so a stand-in reports the task's SM count (the parent passes B200's from
sources/hardware.yaml). It only bounds the launch grid, which a compile never launches.
It answers one JSON line on stdout: seconds per phase.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types


def _quack_without_init() -> None:
    spec = importlib.util.find_spec("quack")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("quack-kernels is not on the path (python -m verifiers.pinned.fa4_compile --install-deps)")
    pkg = types.ModuleType("quack")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["quack"] = pkg


def main() -> None:
    """Compile the variant the task names; artifacts land in CUTE_DSL_DUMP_DIR."""
    task = json.loads(sys.stdin.read())
    _quack_without_init()
    t0 = time.perf_counter()
    import cutlass.utils
    import flash_attn.cute.interface as fa
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    class _HardwareInfo:  # see the module docstring: the SM count for the host-side grid, no driver
        def __init__(self, device_id: int = 0) -> None:
            self.device_id = device_id

        def get_device_multiprocessor_count(self) -> int:
            return int(task["sm_count"])

    cutlass.utils.HardwareInfo = _HardwareInfo
    torch.cuda.current_device = lambda: 0  # see the module docstring: the fake tensors live on cuda:0

    seconds = {"import": round(time.perf_counter() - t0, 2)}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[task["dtype"]]
    b, s, h, hkv = task["batch"], task["seqlen"], task["heads"], task["heads_kv"]
    d, dv = task["head_dim"], task["head_dim_v"]
    with FakeTensorMode():
        q = torch.empty(b, s, h, d, dtype=dtype, device="cuda")
        k = torch.empty(b, s, hkv, d, dtype=dtype, device="cuda")
        v = torch.empty(b, s, hkv, dv, dtype=dtype, device="cuda")
        t = time.perf_counter()
        if task["direction"] == "fwd":
            fa._flash_attn_fwd(q, k, v, causal=task["causal"], return_lse=True)
        else:
            out = torch.empty(b, s, h, dv, dtype=dtype, device="cuda")
            lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
            fa._flash_attn_bwd(q, k, v, out, torch.empty_like(out), lse, causal=task["causal"],
                               deterministic=task["deterministic"])
        seconds[task["direction"]] = round(time.perf_counter() - t, 2)
    print(json.dumps({"seconds": seconds, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
