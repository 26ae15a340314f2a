__global__ void __launch_bounds__(384, 1) k(float* out) {
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  }
  out[threadIdx.x] = 1.f;
}
