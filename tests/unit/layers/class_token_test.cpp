// The class_token style against timm's x[:, 0] (global_pool='token').
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, ClassTokenMatchesTorch) {
  std::string skipped;
  const TorchLayerCase c({"class_token", "cls", {{5, 8}}, {}}, 3,
                         "class M(torch.nn.Module):\n"
                         "    def forward(self, x): return x[:, 0]\n"
                         "m = M()");
  if (!check_layer_against_torch(c, skipped)) GTEST_SKIP() << skipped;
}
