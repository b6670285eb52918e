// The layernorm style against torch.nn.LayerNorm: on features, and on the last axis of a (T, C) sequence.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, LayerNormMatchesTorch) {
  std::string skipped;
  const TorchLayerCase features({"layernorm", "ln", {{16}}, {}}, 6, "m = torch.nn.LayerNorm(16)");
  if (!check_layer_against_torch(features, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase tokens({"layernorm", "ln_tokens", {{5, 8}}, {{"eps", 1e-3}}}, 3,
                              "m = torch.nn.LayerNorm(8, eps=1e-3)");
  if (!check_layer_against_torch(tokens, skipped)) GTEST_SKIP() << skipped;
}
