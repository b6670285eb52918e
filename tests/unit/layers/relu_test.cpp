// The relu style against torch.nn.ReLU, on features and on images.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, ReluMatchesTorch) {
  std::string skipped;
  if (!check_layer_against_torch({{"relu", "relu1", {{10}}, {}}, 5, "m = torch.nn.ReLU()"}, skipped)) GTEST_SKIP() << skipped;
  if (!check_layer_against_torch({{"relu", "relu", {{2, 3, 3}}, {}}, 3, "m = torch.nn.ReLU()"}, skipped))
    GTEST_SKIP() << skipped;
}
