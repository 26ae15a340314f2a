#include <cstdint>
__global__ void __cluster_dims__(2, 1, 1) k(uint32_t dtmem, uint64_t adesc, uint64_t bdesc, uint32_t idesc, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
               "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n}\n"
               :: "r"(dtmem), "l"(adesc), "l"(bdesc), "r"(idesc), "r"(acc));
}
