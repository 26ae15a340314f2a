#include <cstdint>
__global__ void k(const __grid_constant__ uint64_t tmap, float* out, int x, int y) {
  __shared__ alignas(128) float s[32 * 32];
  __shared__ alignas(8) uint64_t bar;
  unsigned dst = (unsigned)__cvta_generic_to_shared(s), mb = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(&tmap), "r"(x), "r"(y), "r"(mb) : "memory");
  out[threadIdx.x] = s[threadIdx.x];
}
