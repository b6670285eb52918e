// The avgpool style against torch.nn.AdaptiveAvgPool2d(1) + flatten, on a ResNet's last feature maps and
// on a plane whose size is no multiple of the eight summing lanes.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

namespace {
const char* const kModule =
    "class M(torch.nn.Module):\n"
    "    def forward(self, x): return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)\n"
    "m = M()";
}

TEST(LayerStyle, AvgPoolMatchesTorch) {
  std::string skipped;
  const TorchLayerCase head({"avgpool", "pool", {{8, 7, 7}}, {}}, 4, kModule);
  if (!check_layer_against_torch(head, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase odd({"avgpool", "pool_odd", {{3, 5, 3}}, {}}, 2, kModule);
  if (!check_layer_against_torch(odd, skipped)) GTEST_SKIP() << skipped;
}
