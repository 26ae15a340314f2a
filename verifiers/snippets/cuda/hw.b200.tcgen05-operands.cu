#include <cstdint>
__global__ void k(uint32_t dtmem, uint32_t atmem, uint64_t bdesc, uint32_t idesc, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
               "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}\n"
               :: "r"(dtmem), "r"(atmem), "l"(bdesc), "r"(idesc), "r"(acc));
}
