#include <cstdint>
__global__ void __cluster_dims__(2, 1, 1) k(float* out, uint64_t adesc, uint64_t bdesc, uint32_t idesc) {
  __shared__ uint32_t taddr_slot;
  __shared__ alignas(8) uint64_t bar;
  unsigned slot = (unsigned)__cvta_generic_to_shared(&taddr_slot);
  unsigned sb = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x < 32) asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], 32;\n" :: "r"(slot));
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(sb));
  __syncthreads();
  uint32_t taddr = taddr_slot;
  if (threadIdx.x == 0) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
                 "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n}\n"
                 :: "r"(taddr), "l"(adesc), "l"(bdesc), "r"(idesc), "r"(0));
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;\n" :: "r"(sb), "h"((unsigned short)3));
  }
  asm volatile("{\n.reg .pred P;\nW: mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0;\n@!P bra W;\n}\n" :: "r"(sb));
  uint32_t v;
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];\n" : "=r"(v) : "r"(taddr));
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
  out[threadIdx.x] = __uint_as_float(v);
}
