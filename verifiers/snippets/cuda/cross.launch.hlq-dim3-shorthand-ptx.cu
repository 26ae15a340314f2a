// kb snippet: the three components of a dim3 built from one integer, as constant-initialised device
// globals, so the emitted PTX states each component's value (the check reads them as tokens).
__device__ unsigned kb_dim3_x = dim3(7).x;
__device__ unsigned kb_dim3_y = dim3(7).y;
__device__ unsigned kb_dim3_z = dim3(7).z;
__global__ void k(unsigned* out) { out[0] = gridDim.x * gridDim.y * gridDim.z + blockDim.x + blockDim.y + blockDim.z; }
