#include <cstdint>
__global__ void k(float* out, uint64_t adesc, uint64_t bdesc, uint32_t idesc, int acc) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %7, 0;\n"
               "tcgen05.mma.cta_group::1.kind::f16 {%0, %1, %2, %3}, %4, %5, %6, p;\n}\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(adesc), "l"(bdesc), "r"(idesc), "r"(acc));
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}
