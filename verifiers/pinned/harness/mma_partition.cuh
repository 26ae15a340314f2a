// kb's own harness for code.mma-partition (verifiers/pinned/partition.py): host code that prints, for every
// thread of a CuTe TiledMma, the (row, column) of each accumulator element the thread holds in an M x N tile.
// It calls only CuTe's layout algebra (get_thread_slice, partition_C over an identity tensor), which is
// host-callable: the program runs on the CPU, no GPU is involved.
#include <cstdio>
#include <cute/tensor.hpp>

template <class TiledMma, int M, int N>
int kb_print_partition() {
  using namespace cute;
  TiledMma mma{};
  auto coords = make_identity_tensor(make_shape(Int<M>{}, Int<N>{}));
  int threads = int(size(mma));
  std::printf("threads %d\n", threads);
  for (int t = 0; t < threads; ++t) {
    auto part = mma.get_thread_slice(t).partition_C(coords);
    for (int i = 0; i < int(size(part)); ++i) {
      auto c = part(i);
      std::printf("%d %d %d\n", t, int(get<0>(c)), int(get<1>(c)));
    }
  }
  return 0;
}
