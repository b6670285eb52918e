// The patch_tokens style against timm's token assembly (flatten(2).transpose(1, 2), class token
// prepended, position embeddings added): on a 3x4 grid of patches, on a ViT-scale one whose (1 + HW) C
// gradient columns span two of the summing blocks, and with C past one block, where cls_token's gradient
// is taken from two blocks.
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

namespace {
std::string module(int c, int tokens) {
  const std::string cs = std::to_string(c), ts = std::to_string(tokens);
  return "class M(torch.nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.cls_token = torch.nn.Parameter(torch.zeros(1, 1, " + cs + "))\n"
         "        self.pos_embed = torch.nn.Parameter(torch.zeros(1, " + ts + ", " + cs + "))\n"
         "    def forward(self, x):\n"
         "        x = x.flatten(2).transpose(1, 2)\n"
         "        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)\n"
         "        return x + self.pos_embed\n"
         "m = M()";
}
}  // namespace

TEST(LayerStyle, PatchTokensMatchesTorch) {
  std::string skipped;
  const TorchLayerCase grid({"patch_tokens", "tokens", {{8, 3, 4}}, {}}, 4, module(8, 13));
  if (!check_layer_against_torch(grid, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase vit({"patch_tokens", "tokens_vit", {{16, 4, 4}}, {}}, 5, module(16, 17));
  if (!check_layer_against_torch(vit, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase wide({"patch_tokens", "tokens_wide", {{300, 1, 2}}, {}}, 3, module(300, 3));
  if (!check_layer_against_torch(wide, skipped)) GTEST_SKIP() << skipped;
}
