// kb's seeded-bug kernels for Compute Sanitizer (verifiers/gpu/micro.py, check gpu.sanitizer).
// `sanitizer_bugs CASE` runs one kernel: each case plants one bug class, `clean` none.
//   oob       a global write one element past the end of a cudaMalloc'd buffer   (memcheck)
//   uninit    a global read of cudaMalloc'd memory nothing wrote                 (initcheck)
//   race      threads of two warps write and read one shared array, no barrier   (racecheck)
//   divergent __syncthreads reached by half of each warp only                    (synccheck)
//   clean     the same work without a bug (every tool must stay silent)
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

constexpr int N = 64;

__global__ void oob(int* out) { out[threadIdx.x + 1] = threadIdx.x; }  // thread N-1 writes out[N]
__global__ void uninit(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x] + 1; }
__global__ void race(int* out) {
  __shared__ int s[N];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[N - 1 - threadIdx.x];  // another warp's element, with no __syncthreads between
}
__global__ void divergent(int* out) {
  __shared__ int s[N];
  s[threadIdx.x] = threadIdx.x;
  if (threadIdx.x % 32 < 16) __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}
__global__ void clean(const int* in, int* out) {
  __shared__ int s[N];
  s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[N - 1 - threadIdx.x];
}

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: %s oob|uninit|race|divergent|clean\n", argv[0]); return 2; }
  int *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, N * sizeof(int)) != cudaSuccess || cudaMalloc(&out, N * sizeof(int)) != cudaSuccess) return 3;
  const char* c = argv[1];
  if (!std::strcmp(c, "oob")) oob<<<1, N>>>(out);
  else if (!std::strcmp(c, "uninit")) uninit<<<1, N>>>(in, out);
  else if (!std::strcmp(c, "race")) race<<<1, N>>>(out);
  else if (!std::strcmp(c, "divergent")) divergent<<<1, N>>>(out);
  else if (!std::strcmp(c, "clean")) {
    cudaMemset(in, 0, N * sizeof(int));
    clean<<<1, N>>>(in, out);
  } else { std::fprintf(stderr, "unknown case %s\n", c); return 2; }
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("case %s: %s\n", c, cudaGetErrorString(e));
  cudaFree(in); cudaFree(out);
  return 0;
}
