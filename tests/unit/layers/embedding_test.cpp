// The embedding style against nanoGPT's token + position embedding (wte(idx) + wpe(arange(T))).
#include <gtest/gtest.h>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, EmbeddingMatchesTorch) {
  std::string skipped;
  TorchLayerCase c({"embedding", "transformer", {{7}}, {{"vocab", 11}, {"dim", 6}}}, 5,
                   "class M(torch.nn.Module):\n"
                   "    def __init__(self):\n"
                   "        super().__init__()\n"
                   "        self.wte = torch.nn.Embedding(11, 6)\n"
                   "        self.wpe = torch.nn.Embedding(7, 6)\n"
                   "    def forward(self, idx): return self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))\n"
                   "m = M()");
  c.integer_inputs = {0};
  c.integer_bound = 11;  // 35 ids over 11 rows of wte: repeated ids sum their gradients
  if (!check_layer_against_torch(c, skipped)) GTEST_SKIP() << skipped;
}
