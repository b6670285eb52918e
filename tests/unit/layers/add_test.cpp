// The add style (residual connections) against a + b in torch, and its refusal of mismatched shapes.
#include <gtest/gtest.h>

#include <stdexcept>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, AddMatchesTorch) {
  std::string skipped;
  const TorchLayerCase residual({"add", "residual", {{4, 6, 6}, {4, 6, 6}}, {}}, 3,
                                "class M(torch.nn.Module):\n"
                                "    def forward(self, a, b): return a + b\n"
                                "m = M()");
  if (!check_layer_against_torch(residual, skipped)) GTEST_SKIP() << skipped;
}

TEST(LayerStyle, AddRefusesMismatchedShapes) {
  try {
    make_layer({"add", "residual", {{4, 6, 6}, {4, 3, 3}}, {}});
    FAIL() << "add accepted (4, 6, 6) + (4, 3, 3)";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}
