// The batchnorm1d / batchnorm2d styles against torch.nn.BatchNorm1d / BatchNorm2d in training mode
// (normalised output, every gradient, the running statistics after one step) and in eval mode.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, BatchNormMatchesTorch) {
  std::string skipped;
  const TorchLayerCase features({"batchnorm1d", "bn1", {{6}}, {{"momentum", 0.1}, {"eps", 1e-5}}}, 8,
                                "m = torch.nn.BatchNorm1d(6, eps=1e-5, momentum=0.1)");
  if (!check_layer_against_torch(features, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase images({"batchnorm2d", "layer1.0.bn1", {{3, 5, 4}}, {{"momentum", 0.2}, {"eps", 1e-3}}}, 4,
                              "m = torch.nn.BatchNorm2d(3, eps=1e-3, momentum=0.2)");
  if (!check_layer_against_torch(images, skipped)) GTEST_SKIP() << skipped;
}
