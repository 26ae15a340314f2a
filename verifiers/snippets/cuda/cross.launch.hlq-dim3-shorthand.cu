static_assert(dim3(7).x == 7 && dim3(7).y == 1 && dim3(7).z == 1, "one integer means (x, 1, 1)");
__global__ void k(unsigned* out) { out[0] = gridDim.x * gridDim.y * gridDim.z + blockDim.x + blockDim.y + blockDim.z; }
