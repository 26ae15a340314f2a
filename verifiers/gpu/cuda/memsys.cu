// kb's own microbenchmarks of two memory-system rules (verifiers/gpu/memsys.py):
//
//  1. Same-word atomics. Every thread adds 1.0f to one FP32 word per iteration with a discarded result
//     (RED.E.ADD.F32, the instruction FA1's dq_tmp accumulation compiles to). Lane t of every warp targets
//     word t of a 128-word group, so a warp's 32 lanes always address 32 different words. The two layouts
//     differ only in which group a CTA uses: "shared" — every CTA uses group 0, so each word is updated by
//     every CTA of the grid; "private" — CTA c uses group c, so no two CTAs touch one word. Same instruction
//     count, same per-warp address pattern; only cross-CTA same-word collisions differ.
//  2. Shared-memory carveout residency. A CTA of one warp with `smem` bytes of dynamic shared memory counts,
//     on its SM, how many CTAs are resident at once (an in-kernel counter per %smid), holding its place for
//     `hold_ns` nanoseconds of %globaltimer so that every CTA the SM can hold is resident together.
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(128) kb_red_kernel(float* words, int shared_words, int iters) {
  float* w = words + (shared_words ? 0 : blockIdx.x * 128) + threadIdx.x;
  for (int i = 0; i < iters; ++i) atomicAdd(w, 1.0f);  // result unused: compiles to RED.E.ADD.F32
}

__global__ void __launch_bounds__(32) kb_resident_kernel(int* live, int* most, unsigned long long hold_ns) {
  extern __shared__ unsigned char pad[];
  const unsigned sm = smid();
  if (threadIdx.x == 0) {
    atomicMax(&most[sm], atomicAdd(&live[sm], 1) + 1);
    pad[0] = (unsigned char)sm;  // the allocation is used, so it is not dropped
    const unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < hold_ns) {
    }
    atomicSub(&live[sm], 1);
  }
}

extern "C" {
// words: 128 * grid floats, zeroed by the caller. Returns the launch error (0 = none).
int kb_red_run(float* words, int shared_words, int grid, int iters, cudaStream_t st) {
  kb_red_kernel<<<grid, 128, 0, st>>>(words, shared_words, iters);
  return (int)cudaGetLastError();
}

// Sets the kernel's dynamic shared-memory size and preferred carveout (percent of the SM's maximum), then
// launches `grid` CTAs. live/most: one int per SM id, zeroed by the caller.
int kb_resident_run(int smem, int carveout_pct, int grid, int* live, int* most, unsigned long long hold_ns,
                    cudaStream_t st) {
  cudaError_t e = cudaFuncSetAttribute(kb_resident_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  e = cudaFuncSetAttribute(kb_resident_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout_pct);
  if (e != cudaSuccess) return (int)e;
  kb_resident_kernel<<<grid, 32, smem, st>>>(live, most, hold_ns);
  return (int)cudaGetLastError();
}

// The device's shared-memory figures the residency model needs: per-SM maximum, per-block reservation.
int kb_smem_limits(int* per_sm, int* reserved_per_block) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) return -1;
  return cudaDeviceGetAttribute(reserved_per_block, cudaDevAttrReservedSharedMemoryPerBlock, dev) == cudaSuccess
             ? 0 : -1;
}
}
