// kb's stand-in CUDA runtime for launch tracing on a virtual device. kb's own code.
//
// Built as libcudart.so.13 (same soname and symbol version as the real runtime), it lets kb's build of a
// pinned revision (verifiers/pinned/build.py: libkb.so, linked with --cudart shared) run its host code on a
// machine without a GPU. The device it reports comes from KB_VDEV (fields below, from sources/hardware.yaml);
// every kernel launch, cluster launch and function attribute the pinned host code makes is appended to the
// file KB_VDEV_TRACE as one JSON object per line. No kernel runs: the launch decisions (which kernel
// template, grid, block, dynamic shared memory, attributes) are what the pinned host code computes for that
// device and input.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace {

struct VDev {
  std::string name = "kb-virtual";
  int major = 9, minor = 0, sms = 132;
  size_t smem_block = 49152, smem_optin = 232448, smem_sm = 233472;
  int regs_sm = 65536, regs_block = 65536, max_threads_sm = 2048, max_blocks_sm = 32, l2 = 50331648;
  size_t mem = size_t(80) << 30;
  size_t reserved_smem = 1024;
};

VDev& vdev() {
  static VDev d;
  static bool init = false;
  if (!init) {
    init = true;
    // KB_VDEV = name,major,minor,sms,smem_block,smem_optin,smem_sm,regs_sm,max_threads_sm,max_blocks_sm,l2,mem,reserved
    if (const char* s = std::getenv("KB_VDEV")) {
      char name[128] = {0};
      unsigned long long sb = 0, so = 0, ss = 0, mem = 0, res = 0;
      int n = std::sscanf(s, "%127[^,],%d,%d,%d,%llu,%llu,%llu,%d,%d,%d,%d,%llu,%llu", name, &d.major, &d.minor,
                          &d.sms, &sb, &so, &ss, &d.regs_sm, &d.max_threads_sm, &d.max_blocks_sm, &d.l2, &mem, &res);
      if (n == 13) {
        d.name = name; d.smem_block = sb; d.smem_optin = so; d.smem_sm = ss; d.mem = mem; d.reserved_smem = res;
      } else {
        std::fprintf(stderr, "kb vdev: KB_VDEV has %d of 13 fields\n", n);
        std::abort();
      }
    }
  }
  return d;
}

std::map<const void*, std::string>& functions() {
  static std::map<const void*, std::string> m;
  return m;
}

void emit(const std::string& json) {
  const char* path = std::getenv("KB_VDEV_TRACE");
  if (!path) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fputs(json.c_str(), f);
    std::fputc('\n', f);
    std::fclose(f);
  }
}

std::string fname(const void* func) {
  auto it = functions().find(func);
  return it == functions().end() ? std::string("?") : it->second;
}

std::string dims(dim3 d) {
  return "[" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "]";
}

struct CallConfig { dim3 grid, block; size_t smem; void* stream; };
CallConfig g_config;
cudaError_t g_last = cudaSuccess;
char g_fatbin_handle[16];

}  // namespace

extern "C" {

void** __cudaRegisterFatBinary(void*) { return reinterpret_cast<void**>(g_fatbin_handle); }
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char* hostFun, char*, const char* deviceName, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {
  functions()[hostFun] = deviceName;
}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
char __cudaInitModule(void**) { return 0; }

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, void* stream) {
  g_config = {grid, block, smem, stream};
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, void* stream) {
  *grid = g_config.grid; *block = g_config.block; *smem = g_config.smem;
  *static_cast<void**>(stream) = g_config.stream;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void**, size_t smem, cudaStream_t) {
  emit("{\"event\":\"launch\",\"kernel\":\"" + fname(func) + "\",\"grid\":" + dims(grid) + ",\"block\":" + dims(block) +
       ",\"smem\":" + std::to_string(smem) + ",\"cluster\":[1,1,1]}");
  return cudaSuccess;
}

// CUDA 13's launch stubs look a kernel handle up once (__cudaGetKernel) and launch through it: the
// handle here is the host stub's address, which __cudaRegisterFunction mapped to the kernel's name.
cudaError_t __cudaGetKernel(cudaKernel_t* handle, const void* fun) {
  *handle = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, args, smem, s);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t s) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, args, smem, s);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* func, void**) {
  dim3 cluster(1, 1, 1);
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == cudaLaunchAttributeClusterDimension)
      cluster = dim3(c->attrs[i].val.clusterDim.x, c->attrs[i].val.clusterDim.y, c->attrs[i].val.clusterDim.z);
  emit("{\"event\":\"launch\",\"kernel\":\"" + fname(func) + "\",\"grid\":" + dims(c->gridDim) + ",\"block\":" +
       dims(c->blockDim) + ",\"smem\":" + std::to_string(c->dynamicSmemBytes) + ",\"cluster\":" + dims(cluster) + "}");
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  emit("{\"event\":\"attribute\",\"kernel\":\"" + fname(func) + "\",\"attribute\":" + std::to_string(int(attr)) +
       ",\"value\":" + std::to_string(value) + "}");
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      size_t(value) > vdev().smem_optin) {
    g_last = cudaErrorInvalidValue;  // what the real runtime says when a kernel asks for more than the device has
    return g_last;
  }
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof(*a));
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

// Occupancy as the CUDA occupancy calculator computes it, from the kernel's registers and static shared
// memory in the build's ptxas report (KB_VDEV_RESOURCES = "mangled:registers:static_smem;..."), the
// device's limits, the block size and the dynamic shared memory; KB_VDEV_OCCUPANCY overrides it (a claim
// that says "if the occupancy API reports N").
int occupancy(const void* func, int block, size_t dyn_smem) {
  if (const char* o = std::getenv("KB_VDEV_OCCUPANCY")) return std::atoi(o);
  const VDev& d = vdev();
  int regs = -1;
  size_t static_smem = 0;
  if (const char* r = std::getenv("KB_VDEV_RESOURCES")) {
    std::string all(r), want = fname(func) + ":";
    size_t at = all.find(want);
    if (at != std::string::npos && (at == 0 || all[at - 1] == ';')) {
      unsigned long long sm = 0;
      std::sscanf(all.c_str() + at + want.size(), "%d:%llu", &regs, &sm);
      static_smem = sm;
    }
  }
  if (regs < 0) return -1;  // unknown kernel: the caller gets an error, not a guess
  int warps = (block + 31) / 32;
  int regs_per_warp = ((regs * 32 + 255) / 256) * 256;
  int by_regs = regs_per_warp ? d.regs_sm / (regs_per_warp * warps) : d.max_blocks_sm;
  size_t per_block = static_smem + dyn_smem + d.reserved_smem;
  int by_smem = per_block ? int(d.smem_sm / per_block) : d.max_blocks_sm;
  int by_threads = d.max_threads_sm / (warps * 32);
  int n = by_regs < by_smem ? by_regs : by_smem;
  n = n < by_threads ? n : by_threads;
  return n < d.max_blocks_sm ? n : d.max_blocks_sm;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* func, int block, size_t smem,
                                                                   unsigned int) {
  *n = occupancy(func, block, smem);
  emit("{\"event\":\"occupancy\",\"kernel\":\"" + fname(func) + "\",\"block\":" + std::to_string(block) +
       ",\"smem\":" + std::to_string(smem) + ",\"value\":" + std::to_string(*n) + "}");
  if (*n < 0) { g_last = cudaErrorInvalidDeviceFunction; return g_last; }
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* func, int block, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, smem, 0);
}

cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  const VDev& d = vdev();
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "%s", d.name.c_str());
  p->major = d.major; p->minor = d.minor; p->multiProcessorCount = d.sms;
  p->sharedMemPerBlock = d.smem_block; p->sharedMemPerBlockOptin = d.smem_optin;
  p->sharedMemPerMultiprocessor = d.smem_sm; p->reservedSharedMemPerBlock = d.reserved_smem;
  p->regsPerBlock = d.regs_block; p->regsPerMultiprocessor = d.regs_sm; p->warpSize = 32;
  p->maxThreadsPerBlock = 1024; p->maxThreadsPerMultiProcessor = d.max_threads_sm;
  p->maxBlocksPerMultiProcessor = d.max_blocks_sm; p->l2CacheSize = d.l2; p->totalGlobalMem = d.mem;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int) {
  const VDev& d = vdev();
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = d.sms; break;
    case cudaDevAttrComputeCapabilityMajor: *v = d.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = d.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(d.smem_optin); break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = int(d.smem_block); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = int(d.smem_sm); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *v = d.regs_sm; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = d.max_threads_sm; break;
    case cudaDevAttrL2CacheSize: *v = d.l2; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    default:
      emit("{\"event\":\"unknown-attribute\",\"attribute\":" + std::to_string(int(attr)) + "}");
      *v = 0;
  }
  return cudaSuccess;
}

// Every fake address is device memory of device 0 (the pinned FA1 API checks where its tensors live).
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  std::memset(a, 0, sizeof(*a));
  a->type = cudaMemoryTypeDevice;
  a->device = 0;
  a->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() { cudaError_t e = g_last; g_last = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return g_last; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "kb vdev error"; }
const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorKbVdev"; }
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMemset(void*, int, size_t) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

}  // extern "C"
