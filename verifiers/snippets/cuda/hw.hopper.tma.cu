#include <cuda.h>
#include <cstdint>
__global__ void k(float* out, const __grid_constant__ CUtensorMap tmap) {
  __shared__ alignas(128) float tile[64 * 64];
  __shared__ alignas(8) uint64_t bar;
  unsigned st = (unsigned)__cvta_generic_to_shared(tile);
  unsigned sb = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(sb));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16384;\n" :: "r"(sb));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(st), "l"(&tmap), "r"(0), "r"(0), "r"(sb) : "memory");
  }
  asm volatile("{\n.reg .pred P;\nW: mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0;\n@!P bra W;\n}\n" :: "r"(sb));
  out[threadIdx.x] = tile[threadIdx.x];
}
