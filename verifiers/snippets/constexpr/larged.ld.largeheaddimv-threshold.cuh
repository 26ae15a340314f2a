template <int Hd, int HdV> struct KbCfg {
  static constexpr auto tile = tile_size_fwd_sm90(Hd, HdV, false, false, 2);
  using Main = flash::CollectiveMainloopFwdSm90<2, cute::Shape<cute::_1, cute::_1, cute::_1>,
      cute::Shape<cute::Int<std::get<0>(tile)>, cute::Int<std::get<1>(tile)>, cute::Int<Hd>>, HdV, cutlass::bfloat16_t, float,
      cutlass::arch::Sm90, false, false, false, false, false, false, false, std::get<2>(tile), std::get<3>(tile), false, false, false>;
};
using KbV512 = KbCfg<64, 512>::Main;
using KbV256 = KbCfg<64, 256>::Main;
