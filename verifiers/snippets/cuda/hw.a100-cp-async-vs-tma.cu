__global__ void k(const float4* g, float* out) {
  __shared__ float4 s[128];
  unsigned dst = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(g + blockIdx.x * 128 + threadIdx.x));
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x].x;
}
