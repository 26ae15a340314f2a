// kb's probe of which fatbinary image the CUDA runtime runs (verifiers/gpu/micro.py, check gpu.image-select).
// The kernel writes __CUDA_ARCH__ as the device compiler saw it for the image that ran: 900 from sm_90 SASS,
// 800 from sm_80 SASS, 860 from compute_86 PTX JIT-compiled by the driver. The program prints one line,
// `arch N` or `error NAME`, so a build without a compatible image reports the runtime's refusal.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void which_image(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}

int main() {
  int* d = nullptr;
  int h = -1;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) { std::printf("error cudaMalloc\n"); return 0; }
  which_image<<<1, 1>>>(d);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) std::printf("error %s\n", cudaGetErrorName(e));
  else std::printf("arch %d\n", h);
  cudaFree(d);
  return 0;
}
