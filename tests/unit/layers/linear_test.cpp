// The linear style against torch.nn.Linear: on features, and on the last axis of a (T, C) sequence.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, LinearMatchesTorch) {
  std::string skipped;
  const TorchLayerCase features({"linear", "fc", {{12}}, {{"out", 5}}}, 6, "m = torch.nn.Linear(12, 5)");
  if (!check_layer_against_torch(features, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase tokens({"linear", "qkv", {{3, 8}}, {{"out", 24}, {"bias", 0}}}, 4,
                              "m = torch.nn.Linear(8, 24, bias=False)");
  if (!check_layer_against_torch(tokens, skipped)) GTEST_SKIP() << skipped;
}
