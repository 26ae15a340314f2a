#include <cstdint>
#include <cuda.h>
__global__ void __cluster_dims__(2, 1, 1) k(float* out, const __grid_constant__ CUtensorMap tmap, uint64_t da, uint64_t db, int scale) {
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
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(scale));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  unsigned remote; float peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 1;\n" : "=r"(remote) : "r"(st));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(peer) : "r"(remote));
  out[threadIdx.x] = d0 + d1 + d2 + d3 + tile[threadIdx.x] + peer;
}
