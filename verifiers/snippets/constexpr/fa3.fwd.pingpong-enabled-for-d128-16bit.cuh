using KbD64 = Flash_fwd_kernel_traits<64, 192, 128, 16, 2, false, 1, cutlass::bfloat16_t>;
using KbD128c = Flash_fwd_kernel_traits<128, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t>;
using KbD128n = Flash_fwd_kernel_traits<128, 128, 176, 12, 2, false, 1, cutlass::bfloat16_t>;
using KbD128h = Flash_fwd_kernel_traits<128, 128, 128, 12, 2, false, 1, cutlass::half_t>;
using KbD256 = Flash_fwd_kernel_traits<256, 128, 80, 12, 2, false, 1, cutlass::bfloat16_t>;
template <class Tr, bool Causal> using KbMain = flash::CollectiveMainloopFwd<Tr, Causal, flash::FixedSeqLenTraits>;
