"""The few PyTorch names the pinned FA1/FA2 kernel units include, supplied by kb.

The pinned v1.0.9 and v2.0.0 kernels include ATen headers for glue only: the
CUDA error-check macros, `at::cuda::getCurrentDeviceProperties()`, and the
Philox RNG state (`at::PhiloxCudaState` with `at::cuda::philox::unpack`). The
CPU torch wheel cannot provide them (its CUDA headers are incomplete), so a
build here puts this small directory first on the include path. It is kb's
own code, written from the documented behaviour of those names (a captured
CUDA-graph state reads seed and offset through pointers; otherwise by value);
the kernel sources stay byte-identical to the pin, and evidence records the
hash of this shim. Kept as a module so the verifier's code hash covers it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_PHILOX = """#pragma once
#include <cstdint>
#include <tuple>
namespace at {
// Seed and offset of the Philox generator: by value, or through device pointers under graph capture.
struct PhiloxCudaState {
  PhiloxCudaState() = default;
  PhiloxCudaState(uint64_t seed, uint64_t offset) { seed_.val = seed; offset_.val = offset; }
  PhiloxCudaState(int64_t* seed, int64_t* offset_extragraph, uint32_t offset_intragraph) {
    seed_.ptr = seed; offset_.ptr = offset_extragraph; offset_intragraph_ = offset_intragraph; captured_ = true;
  }
  union Payload { uint64_t val; int64_t* ptr; };
  Payload seed_{};
  Payload offset_{};
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}  // namespace at
"""

_UNPACK = """#pragma once
#include <ATen/cuda/CUDAGeneratorImpl.h>
namespace at { namespace cuda { namespace philox {
__host__ __device__ __forceinline__ std::tuple<uint64_t, uint64_t> unpack(at::PhiloxCudaState arg) {
  if (arg.captured_) {
    return std::make_tuple(static_cast<uint64_t>(*arg.seed_.ptr),
                           static_cast<uint64_t>(*(arg.offset_.ptr) + arg.offset_intragraph_));
  }
  return std::make_tuple(arg.seed_.val, arg.offset_.val);
}
}}}  // namespace at::cuda::philox
"""

_CONTEXT = """#pragma once
#include <cuda_runtime_api.h>
#include <cstdio>
#include <cstdlib>
#define C10_CUDA_CHECK(EXPR) do { cudaError_t kb_err = (EXPR); \\
  if (kb_err != cudaSuccess) { std::fprintf(stderr, "CUDA error %s\\n", cudaGetErrorString(kb_err)); std::abort(); } } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
namespace at { namespace cuda {
cudaDeviceProp* getCurrentDeviceProperties();  // defined by whatever links the launcher
}}  // namespace at::cuda
"""

FILES = {
    "ATen/cuda/CUDAContext.h": _CONTEXT,
    "ATen/cuda/CUDAGeneratorImpl.h": _PHILOX,
    "ATen/CUDAGeneratorImpl.h": "#pragma once\n#include <ATen/cuda/CUDAGeneratorImpl.h>\n",
    "ATen/cuda/CUDAGraphsUtils.cuh": _UNPACK,
    "ATen/cuda/detail/UnpackRaw.cuh": "#pragma once\n#include <ATen/cuda/CUDAGraphsUtils.cuh>  // v1.0.9's name for it\n",
}


def digest() -> str:
    """Hash of the shim's files (recorded in evidence)."""
    h = hashlib.sha256()
    for name in sorted(FILES):
        h.update(name.encode() + b"\0" + FILES[name].encode())
    return h.hexdigest()[:16]


def write(root: Path) -> Path:
    """Write the shim under `root/aten-shim-<digest>` once; returns the include directory."""
    out = root / f"aten-shim-{digest()}"
    if not (out / ".complete").exists():
        for name, text in FILES.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
        (out / ".complete").write_text(digest())
    return out
