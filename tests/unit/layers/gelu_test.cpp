// The gelu style against torch.nn.GELU, exact (erf) and tanh-approximated.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, GeluMatchesTorch) {
  std::string skipped;
  // input_scale 3 reaches both tails (|x| up to ~8), past where erf and tanh saturate in float.
  TorchLayerCase exact({"gelu", "gelu", {{3, 7}}, {}}, 4, "m = torch.nn.GELU()");
  exact.input_scale = 3.0;
  if (!check_layer_against_torch(exact, skipped)) GTEST_SKIP() << skipped;
  TorchLayerCase tanh({"gelu", "gelu_tanh", {{3, 7}}, {{"tanh", 1}}}, 4, "m = torch.nn.GELU(approximate='tanh')");
  tanh.input_scale = 3.0;
  if (!check_layer_against_torch(tanh, skipped)) GTEST_SKIP() << skipped;
}
