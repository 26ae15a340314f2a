__global__ void k(float* out, const float* x, int n) {
  float acc[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) acc[j] = x[threadIdx.x * 48 + j];
  for (int i = 0; i < n; ++i) {
#pragma unroll
    for (int j = 0; j < 48; ++j) acc[j] = acc[j] * acc[(j + 7) % 48] + x[i];
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 48; ++j) s += acc[j];
  out[threadIdx.x] = s;
}
