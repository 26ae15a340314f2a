#include <cstdint>
__global__ void k(float* out) {
  __shared__ uint32_t taddr;
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;\n" :: "r"((uint32_t)__cvta_generic_to_shared(&taddr)));
  out[threadIdx.x] = (float)taddr;
}
