// The attention style against the same math in torch: split q, k, v, heads, softmax(q k^T * scale +
// mask) v, heads merged; causal and not.
#include <gtest/gtest.h>

#include <string>

#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

namespace {

std::string attention_module(int heads, bool causal) {
  return "class Attention(torch.nn.Module):\n"
         "    def forward(self, x):\n"
         "        B, T, C = x.shape[0], x.shape[1], x.shape[2] // 3\n"
         "        nh = " + std::to_string(heads) + "\n"
         "        q, k, v = (t.reshape(B, T, nh, C // nh).transpose(1, 2) for t in x.split(C, dim=2))\n"
         "        s = (q @ k.transpose(-2, -1)) * (C // nh) ** -0.5\n" +
         (causal ? "        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))\n" : "") +
         "        return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)\n"
         "m = Attention()";
}

}  // namespace

TEST(LayerStyle, AttentionMatchesTorch) {
  std::string skipped;
  const TorchLayerCase causal({"attention", "attn", {{5, 24}}, {{"heads", 2}, {"causal", 1}}}, 3, attention_module(2, true));
  if (!check_layer_against_torch(causal, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase full({"attention", "attn_full", {{5, 24}}, {{"heads", 2}, {"causal", 0}}}, 3, attention_module(2, false));
  if (!check_layer_against_torch(full, skipped)) GTEST_SKIP() << skipped;
}
