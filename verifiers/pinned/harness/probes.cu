// kb's own micro-probes of the GPU execution model, driven from Python (ctypes) by verifiers/gpu/probe.py.
// Nothing here comes from a pinned repository: each kernel records what the hardware did (which SM ran a
// thread, when a CTA started and ended, what an mma.sync produced, how many atomic updates landed).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace {

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

// Every thread writes the SM it runs on; thread 0 of each CTA writes the CTA's start and end time.
// CTA 0 spins `slow_factor` times longer than the others, so a later CTA can only start before CTA 0
// ends if nothing holds it back until the whole first "wave" is done.
__global__ void smid_kernel(unsigned* thread_sm, unsigned long long* start, unsigned long long* end,
                            unsigned* cta_sm, long long spin_ns, int slow_factor) {
  // The dynamic shared memory the caller requests (never touched) only sizes how many CTAs fit on an SM.
  const unsigned cta = blockIdx.x;
  const unsigned long long t0 = globaltimer();
  thread_sm[cta * blockDim.x + threadIdx.x] = smid();
  if (threadIdx.x == 0) {
    start[cta] = t0;
    cta_sm[cta] = smid();
    const long long budget = spin_ns * (cta == 0 ? slow_factor : 1);
    while ((long long)(globaltimer() - t0) < budget) {
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) end[cta] = globaltimer();
}

// One warp, one mma.sync.m16n8k16 (bf16 inputs, fp32 accumulate). Each lane loads its A, B and C
// registers from the matrices through the caller's index tables (the layout under test) and stores its
// D registers through the D table: the product is right only if all three tables are the hardware's.
__global__ void mma_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D,
                           const int* a_idx, const int* b_idx, const int* c_idx) {
  const int lane = threadIdx.x;
  unsigned a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 v;
    v.x = A[a_idx[lane * 8 + 2 * i]];
    v.y = A[a_idx[lane * 8 + 2 * i + 1]];
    a[i] = *reinterpret_cast<unsigned*>(&v);
  }
  for (int i = 0; i < 2; ++i) {
    __nv_bfloat162 v;
    v.x = B[b_idx[lane * 4 + 2 * i]];
    v.y = B[b_idx[lane * 4 + 2 * i + 1]];
    b[i] = *reinterpret_cast<unsigned*>(&v);
  }
  for (int i = 0; i < 4; ++i) c[i] = C[c_idx[lane * 4 + i]];
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
  for (int i = 0; i < 4; ++i) D[c_idx[lane * 4 + i]] = d[i];
}

// Every thread adds 1 to an integer counter and its value to one float sum, with atomics.
__global__ void atomic_kernel(const float* vals, float* fsum, unsigned long long* count) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(count, 1ull);
  atomicAdd(fsum, vals[i]);
}

int check() { return cudaGetLastError() == cudaSuccess ? 0 : 1; }

}  // namespace

extern "C" {

int kb_probe_smid(int grid, int block, int smem_bytes, long long spin_ns, int slow_factor, unsigned* thread_sm,
                  unsigned long long* start, unsigned long long* end, unsigned* cta_sm, cudaStream_t stream) {
  if (smem_bytes > 48 * 1024 &&
      cudaFuncSetAttribute(smid_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) != cudaSuccess)
    return 2;
  smid_kernel<<<grid, block, smem_bytes, stream>>>(thread_sm, start, end, cta_sm, spin_ns, slow_factor);
  return check();
}

// How many CTAs of the probe kernel the runtime says fit on one SM at this block size and shared memory.
int kb_probe_smid_occupancy(int block, int smem_bytes) {
  int n = -1;
  if (smem_bytes > 48 * 1024)
    cudaFuncSetAttribute(smid_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, smid_kernel, block, smem_bytes) != cudaSuccess) return -1;
  return n;
}

int kb_probe_mma(const void* A, const void* B, const float* C, float* D, const int* a_idx, const int* b_idx,
                 const int* c_idx, cudaStream_t stream) {
  mma_kernel<<<1, 32, 0, stream>>>(static_cast<const __nv_bfloat16*>(A), static_cast<const __nv_bfloat16*>(B), C, D,
                                   a_idx, b_idx, c_idx);
  return check();
}

int kb_probe_atomic(int grid, int block, const float* vals, float* fsum, unsigned long long* count,
                    cudaStream_t stream) {
  atomic_kernel<<<grid, block, 0, stream>>>(vals, fsum, count);
  return check();
}

}  // extern "C"
