// kb's own per-SM throughput microbenchmarks for sm_90a (verifiers/gpu/micro.py loads this as a library).
//
// Every kernel does a known number of operations per CTA between two __syncthreads, and thread 0 records
// (%smid, clock64 at the start, clock64 at the end, %globaltimer ns elapsed). The host groups CTAs by SM and
// divides the operations an SM ran by the cycles between its earliest start and latest end: a per-clock
// figure, independent of the clock the GPU happened to run at (power or thermal throttling changes both).
//
// - ex2:   ex2.approx.ftz.f32 (MUFU.EX2), 8 independent chains per thread, 1024 threads per CTA
// - lds:   ld.shared.v4.u32 (LDS.128), conflict-free (a warp reads 512 contiguous bytes), 1024 threads per CTA
// - wgmma: wgmma.mma_async m64n256k16 BF16 -> FP32 (HGMMA), both operands from shared memory, two warpgroups
//          per CTA each with its own accumulator, 4 MMAs per commit group
// - regheavy: one body, two register budgets (__launch_bounds__ min blocks 1 vs 8): the capped build runs
//          more warps per SM but spills its array to local memory; per-SM residency recorded with atomics.
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ unsigned smid() { unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

struct Stamp { long long c0; unsigned long long g0; };

__device__ __forceinline__ Stamp begin() { __syncthreads(); return Stamp{clock64(), gtimer()}; }
__device__ __forceinline__ void end(Stamp s, long long* rec) {
  __syncthreads();
  long long c1 = clock64(); unsigned long long g1 = gtimer();
  if (threadIdx.x == 0) {
    long long* r = rec + 4 * blockIdx.x;
    r[0] = smid(); r[1] = s.c0; r[2] = c1; r[3] = (long long)(g1 - s.g0);
  }
}

#define EX2_CHAINS 8
__global__ void __launch_bounds__(1024) kb_ex2_kernel(int iters, long long* rec, float* sink) {
  float x[EX2_CHAINS];
#pragma unroll
  for (int c = 0; c < EX2_CHAINS; ++c) x[c] = -1.0f - 0.001f * (threadIdx.x + c);
  Stamp s = begin();
#pragma unroll 4
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < EX2_CHAINS; ++c) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[c]));
  }
  end(s, rec);
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < EX2_CHAINS; ++c) acc += x[c];
  if (acc == 1.2345f) sink[blockIdx.x] = acc;  // keeps the chains live; never true in practice
}

#define LDS_UNROLL 8
__global__ void __launch_bounds__(1024) kb_lds_kernel(int iters, long long* rec, unsigned* sink) {
  __shared__ __align__(16) uint4 buf[2048];  // 32 KiB
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) buf[i] = make_uint4(i, i * 3, i * 5, i * 7);
  unsigned base = (unsigned)__cvta_generic_to_shared(&buf[threadIdx.x % 1024]);
  unsigned a = 0, b = 0, c = 0, d = 0;
  Stamp s = begin();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < LDS_UNROLL; ++u) {
      unsigned x, y, z, w;
      // 16 KiB apart: alternate halves of the buffer, each thread its own 16 bytes (no bank conflicts);
      // .volatile so ptxas keeps every load (a plain load of an unchanged address may be merged)
      asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(base + (u & 1) * 16384));
      a ^= x; b ^= y; c ^= z; d ^= w;
    }
  }
  end(s, rec);
  if ((a ^ b ^ c ^ d) == 0x9e3779b9u) sink[blockIdx.x] = a;
}

// ---- WGMMA m64n256k16 BF16 ----
__device__ __forceinline__ uint64_t smem_desc(unsigned addr) {
  // No-swizzle K-major descriptor: start address, leading byte offset 128, stride byte offset 256 (all >> 4).
  // The operand contents are irrelevant to the throughput; the addresses stay inside the 32 KiB buffer.
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
  "+f"(d[i + 6]), "+f"(d[i + 7])
#define R64(i) R8(i), R8(i + 8), R8(i + 16), R8(i + 24), R8(i + 32), R8(i + 40), R8(i + 48), R8(i + 56)

__device__ __forceinline__ void wgmma_256(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n}\n"
      : R64(0), R64(64)
      : "l"(da), "l"(db));
}

#define WGMMA_PER_GROUP 4
__global__ void __launch_bounds__(256, 1) kb_wgmma_kernel(int iters, long long* rec, float* sink) {
  __shared__ __align__(1024) unsigned char buf[32768];
  for (int i = threadIdx.x; i < 32768 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(buf)[i] = 0x3c003c00u * (i & 1);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic-proxy writes seen by the async proxy
  const int wg = threadIdx.x / 128;
  unsigned base = (unsigned)__cvta_generic_to_shared(buf);
  uint64_t da = smem_desc(base + wg * 2048), db = smem_desc(base + 8192);
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  Stamp s = begin();
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < WGMMA_PER_GROUP; ++k) wgmma_256(d, da, db);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  end(s, rec);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 128; ++i) acc += d[i];
  if (acc == 1.2345f) sink[blockIdx.x] = acc;
}

// ---- occupancy vs spills ----
#define REG_N 64
template <int MIN_BLOCKS>
__global__ void __launch_bounds__(256, MIN_BLOCKS) kb_regheavy_kernel(int iters, float* out, int* live, int* most) {
  const unsigned sm = smid();
  if (threadIdx.x == 0) atomicMax(&most[sm], atomicAdd(&live[sm], 1) + 1);
  float a[REG_N];
#pragma unroll
  for (int i = 0; i < REG_N; ++i) a[i] = 1.0f + 1e-3f * (threadIdx.x + i);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < REG_N; ++i) a[i] = fmaf(a[i], a[(i + 1) % REG_N], -1e-7f * i);
  }
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < REG_N; ++i) acc += a[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) atomicSub(&live[sm], 1);
}

template <typename K> static int occupancy(K k, int block, int* ctas, int* regs, int* local) {
  cudaFuncAttributes at;
  if (cudaFuncGetAttributes(&at, k) != cudaSuccess) return -1;
  *regs = at.numRegs; *local = (int)at.localSizeBytes;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas, k, block, 0) == cudaSuccess ? 0 : -1;
}

extern "C" {
int kb_micro_ctas_per_sm(int which, int* ctas, int* regs, int* local) {
  switch (which) {
    case 0: return occupancy(kb_ex2_kernel, 1024, ctas, regs, local);
    case 1: return occupancy(kb_lds_kernel, 1024, ctas, regs, local);
    case 2: return occupancy(kb_wgmma_kernel, 256, ctas, regs, local);
    case 3: return occupancy(kb_regheavy_kernel<1>, 256, ctas, regs, local);
    case 4: return occupancy(kb_regheavy_kernel<8>, 256, ctas, regs, local);
  }
  return -2;
}

// which: 0 ex2, 1 lds, 2 wgmma. rec holds 4 long longs per CTA; sink one word per CTA.
int kb_micro_tput(int which, int grid, int iters, long long* rec, void* sink, cudaStream_t st) {
  switch (which) {
    case 0: kb_ex2_kernel<<<grid, 1024, 0, st>>>(iters, rec, (float*)sink); break;
    case 1: kb_lds_kernel<<<grid, 1024, 0, st>>>(iters, rec, (unsigned*)sink); break;
    case 2: kb_wgmma_kernel<<<grid, 256, 0, st>>>(iters, rec, (float*)sink); break;
    default: return -2;
  }
  return (int)cudaGetLastError();
}

// capped 0: __launch_bounds__(256, 1); capped 1: __launch_bounds__(256, 8) (at most 32 registers).
int kb_micro_regheavy(int capped, int grid, int iters, float* out, int* live, int* most, cudaStream_t st) {
  if (capped) kb_regheavy_kernel<8><<<grid, 256, 0, st>>>(iters, out, live, most);
  else kb_regheavy_kernel<1><<<grid, 256, 0, st>>>(iters, out, live, most);
  return (int)cudaGetLastError();
}
}
