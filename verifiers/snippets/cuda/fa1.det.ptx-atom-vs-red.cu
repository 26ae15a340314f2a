__global__ void k(float* p, float v, float* o) { float old; asm volatile("atom.global.add.f32 %0, [%1], %2;" : "=f"(old) : "l"(p), "f"(v)); *o = old; }
