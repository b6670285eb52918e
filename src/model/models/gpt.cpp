// model.type = gpt: a character-level GPT-2 decoder, laid out and named as nanoGPT's GPT
// (https://github.com/karpathy/nanoGPT, model.py) so /init loads into it with load_state_dict:
//   transformer           token + position embedding (embedding: wte, wpe)
//   transformer.drop      [dropout]
//   transformer.h.<i>     x = x + [drop](attn.c_proj(causal attention(attn.c_attn(ln_1(x)))))
//                         x = x + [drop](mlp.c_proj(GELU(mlp.c_fc(ln_2(x)))))      for i < model.depth
//   transformer.ln_f      LayerNorm
//   lm_head               logits = x wte^T: no bias, its weight IS transformer.wte.weight (tied)
// The output is (T, V) logits per sequence: the loss counts every position whose target is not padding,
// normalised by the global batch's count of such positions (trainer.cpp, normalise_loss).
// Settings: model.block_size (T, the data's sequence length), dim, heads, depth, mlp_ratio, dropout.
// Init as GPT-2 / nanoGPT: Linear weights N(0, .02) with zero biases, the two residual projections
// (attn.c_proj, mlp.c_proj) N(0, .02 / sqrt(2 depth)), embeddings N(0, .02), LayerNorm 1 and 0.
// Differences from nanoGPT: GELU is the tanh approximation (GPT-2's and llm.c's; nanoGPT's nn.GELU()
// is exact); there is no dropout on the attention weights (nanoGPT's attn_dropout); the head is tied
// by sharing the tensor, as nanoGPT's `wte.weight = lm_head.weight` does.
#include <cmath>
#include <string>

#include "config/config_error.hpp"
#include "model/model.hpp"

namespace divsim {
namespace {

void build_gpt(ModelBuilder& b) {
  const ModelSection& c = b.config;
  const Shape& input = b.shape(ModelBuilder::input());
  if (input.size() != 1 || input[0] != c.block_size)
    throw ConfigError("model.type", "gpt needs token sequences of model.block_size = " + std::to_string(c.block_size) +
                                        " (data.source=fortunes or text), got samples of shape " + to_string(input));
  const auto dim = static_cast<double>(c.dim);
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.depth));
  const std::map<std::string, double> ln = {{"eps", 1e-5}};

  int x = b.add("embedding", "transformer", {ModelBuilder::input()},
                {{"vocab", static_cast<double>(b.classes)}, {"dim", dim}});
  if (c.dropout > 0.0) x = b.add("dropout", "transformer.drop", {x}, {{"p", c.dropout}});
  for (std::int64_t i = 0; i < c.depth; ++i) {
    const std::string n = "transformer.h." + std::to_string(i);
    int h = b.add("layernorm", n + ".ln_1", {x}, ln);
    h = b.add("linear", n + ".attn.c_attn", {h}, {{"out", 3 * dim}, {"init_std", std}});
    h = b.add("attention", n + ".attn", {h}, {{"heads", static_cast<double>(c.heads)}, {"causal", 1}});
    h = b.add("linear", n + ".attn.c_proj", {h}, {{"out", dim}, {"init_std", residual_std}});
    if (c.dropout > 0.0) h = b.add("dropout", n + ".attn.resid_dropout", {h}, {{"p", c.dropout}});
    x = b.add("add", n + ".add1", {x, h});
    h = b.add("layernorm", n + ".ln_2", {x}, ln);
    h = b.add("linear", n + ".mlp.c_fc", {h}, {{"out", static_cast<double>(c.mlp_ratio) * dim}, {"init_std", std}});
    h = b.add("gelu", n + ".mlp.gelu", {h}, {{"tanh", 1}});
    h = b.add("linear", n + ".mlp.c_proj", {h}, {{"out", dim}, {"init_std", residual_std}});
    if (c.dropout > 0.0) h = b.add("dropout", n + ".mlp.dropout", {h}, {{"p", c.dropout}});
    x = b.add("add", n + ".add2", {x, h});
  }
  x = b.add("layernorm", "transformer.ln_f", {x}, ln);
  b.add("linear", "lm_head", {x}, {{"out", static_cast<double>(b.classes)}, {"bias", 0}},
        {{"weight", "transformer.wte.weight"}});
  // Evaluation keeps one buffer of eval_batch rows per activation: about 300k floats a sequence at the
  // defaults (T 64, dim 64, depth 4, V ~100). Budget 64M floats (256 MB).
  b.eval_batch_within(std::int64_t{64} << 20);
}

}  // namespace

DIVSIM_REGISTER_MODEL("gpt", build_gpt);

}  // namespace divsim
