#include <cstdint>
using cudaStream_t = void *;
enum cudaError { cudaSuccess = 0 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
struct Flash_fwd_params { float p_dropout; bool is_causal; };
struct kb_half {};
struct kb_device_props { int major; int minor; };
static kb_device_props kb_props;
static int kb_smem_per_block_optin, kb_smem_per_sm, kb_headdim_run;
static long long kb_tile;
namespace at { namespace cuda { inline kb_device_props *getCurrentDeviceProperties() { return &kb_props; } } }
inline cudaError cudaGetDevice(int *device) { *device = 0; return cudaSuccess; }
inline cudaError cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
    *value = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? kb_smem_per_block_optin : kb_smem_per_sm;
    return cudaSuccess;
}
// kb stand-in for the compile-time bool dispatch macro: each branch binds NAME as a constexpr bool.
#define BOOL_SWITCH(COND, NAME, ...) \
    ((COND) ? [&] { constexpr bool NAME = true; return __VA_ARGS__(); }() \
            : [&] { constexpr bool NAME = false; return __VA_ARGS__(); }())
// kb stand-ins: the traits record the tile they are instantiated with; run_flash_fwd records the choice.
template<int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, bool Is_Q_in_regs_, bool Share_Q_K_smem_, typename elem_type>
struct Flash_fwd_kernel_traits {
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr long long kb_code = kBlockM_ * 10000LL + kBlockN_ * 10LL + kNWarps_;
};
template<typename Kernel_traits, bool Is_dropout, bool Is_causal>
void run_flash_fwd(Flash_fwd_params &, cudaStream_t) { kb_tile = Kernel_traits::kb_code; kb_headdim_run = Kernel_traits::kHeadDim; }
template<typename T> void run_mha_fwd_hdim32(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim64(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim96(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim128(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim160(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim192(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim224(Flash_fwd_params &, cudaStream_t);
template<typename T> void run_mha_fwd_hdim256(Flash_fwd_params &, cudaStream_t);
// Tile chosen for head dim d: kBlockM * 10000 + kBlockN * 10 + kNWarps (-1 if none).
inline long long kb_fwd_tile(int d, bool dropout, bool causal, int major, int minor, int smem_block, int smem_sm) {
    kb_props.major = major; kb_props.minor = minor;
    kb_smem_per_block_optin = smem_block; kb_smem_per_sm = smem_sm;
    Flash_fwd_params params{dropout ? 0.9f : 1.f, causal};
    kb_tile = -1; kb_headdim_run = -1;
    switch (d) {
        case 32: run_mha_fwd_hdim32<kb_half>(params, nullptr); break;
        case 64: run_mha_fwd_hdim64<kb_half>(params, nullptr); break;
        case 96: run_mha_fwd_hdim96<kb_half>(params, nullptr); break;
        case 128: run_mha_fwd_hdim128<kb_half>(params, nullptr); break;
        case 160: run_mha_fwd_hdim160<kb_half>(params, nullptr); break;
        case 192: run_mha_fwd_hdim192<kb_half>(params, nullptr); break;
        case 224: run_mha_fwd_hdim224<kb_half>(params, nullptr); break;
        case 256: run_mha_fwd_hdim256<kb_half>(params, nullptr); break;
    }
    return kb_headdim_run == d ? kb_tile : -1;
}
