// The gpt model (model/models/gpt.cpp): nanoGPT's names and tied head, and one step against the same
// network written in torch with a padded, token-normalised loss.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "config/config_error.hpp"
#include "engine_rig.hpp"
#include "model/model.hpp"
#include "record/json.hpp"
#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

namespace {

constexpr std::int64_t kT = 8, kVocab = 9;

ModelSection gpt_cfg() {
  ModelSection c;
  c.type = "gpt";
  c.block_size = kT;
  c.depth = 2;
  c.dim = 16;
  c.heads = 2;
  c.mlp_ratio = 4;
  return c;
}

}  // namespace

TEST(ModelGpt, NanoGptNamesAndOneTiedTensor) {
  const Model m(gpt_cfg(), {kT}, kVocab);
  std::vector<std::string> keys;
  for (const ParamTensor& t : m.tensors()) keys.push_back(t.key());
  ASSERT_GE(keys.size(), 3u);
  EXPECT_EQ(keys[0], "transformer.wte.weight");
  EXPECT_EQ(keys[1], "transformer.wpe.weight");
  EXPECT_EQ(keys[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(keys.back(), "transformer.ln_f.bias");
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "lm_head.weight"), 0) << "the head's weight is wte, not a tensor of its own";
  const Layer& head = m.layer(m.size() - 1);
  EXPECT_EQ(head.name(), "lm_head");
  ASSERT_EQ(head.params().size(), 1u);
  EXPECT_EQ(head.params()[0].tied, "transformer.wte.weight");
  EXPECT_EQ(head.param(0), m.tensors()[0].offset);
  EXPECT_EQ(m.targets(), kT);
  EXPECT_EQ(m.activations().back(), (Shape{kT, kVocab}));
  const std::string json = m.to_json("gpt");
  EXPECT_NE(json.find("\"tied\": {\"weight\": \"transformer.wte.weight\"}"), std::string::npos) << json;
}

TEST(ModelGpt, RefusesWhatItCannotRun) {
  try {
    const Model m(gpt_cfg(), {1, 28, 28}, 10);
    ADD_FAILURE() << "images were accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.type") << e.what();
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
  }
}

TEST(ModelGpt, OneStepMatchesPyTorch) {
  // Six padded sequences through the mpi-mode engine in one micro-batch, scaled as the step loop scales
  // a token loss (1 / the counted targets), vs nanoGPT's GPT in torch (GELU tanh, no dropout) loaded
  // with divsim's initial parameters by state_dict key: the loss (cross_entropy with ignore_index), every
  // gradient, the tied one included (1e-5 of each tensor's largest |grad|), and the eval loss.
  constexpr std::int64_t kSequences = 6;
  const Dataset data = make_sequences(kSequences, kT, kVocab);
  RigSpec spec{gpt_cfg()};
  spec.micro = kSequences;
  Rig rig(spec, data);
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < kSequences; ++i) counted += data.counted(i);
  ASSERT_LT(counted, kSequences * kT) << "the fixture should pad";
  rig.grad_scale = 1.0f / static_cast<float>(counted);
  Replica& r = rig.replicas[0];
  const std::vector<float> params = r.params;
  rig.run_step(0, {range(0, kSequences)});
  rig.reduce(1.0);
  const EvalResult eval = rig.engine.evaluate(r, data);

  const std::string net =
      "class CausalSelfAttention(nn.Module):\n"
      "    def __init__(self, dim, heads):\n"
      "        super().__init__()\n"
      "        self.heads = heads\n"
      "        self.c_attn = nn.Linear(dim, 3 * dim)\n"
      "        self.c_proj = nn.Linear(dim, dim)\n"
      "    def forward(self, x):\n"
      "        B, T, C = x.shape\n"
      "        q, k, v = self.c_attn(x).split(C, dim=2)\n"
      "        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))\n"
      "        att = q @ k.transpose(-2, -1) * (C // self.heads) ** -0.5\n"
      "        att = att.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')).softmax(dim=-1)\n"
      "        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))\n"
      "class MLP(nn.Module):\n"
      "    def __init__(self, dim, hidden):\n"
      "        super().__init__()\n"
      "        self.c_fc = nn.Linear(dim, hidden)\n"
      "        self.gelu = nn.GELU(approximate='tanh')\n"
      "        self.c_proj = nn.Linear(hidden, dim)\n"
      "    def forward(self, x): return self.c_proj(self.gelu(self.c_fc(x)))\n"
      "class Block(nn.Module):\n"
      "    def __init__(self, dim, heads, ratio):\n"
      "        super().__init__()\n"
      "        self.ln_1 = nn.LayerNorm(dim)\n"
      "        self.attn = CausalSelfAttention(dim, heads)\n"
      "        self.ln_2 = nn.LayerNorm(dim)\n"
      "        self.mlp = MLP(dim, ratio * dim)\n"
      "    def forward(self, x):\n"
      "        x = x + self.attn(self.ln_1(x))\n"
      "        return x + self.mlp(self.ln_2(x))\n"
      "class GPT(nn.Module):\n"
      "    def __init__(self, vocab, block, dim, depth, heads, ratio):\n"
      "        super().__init__()\n"
      "        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab, dim), wpe=nn.Embedding(block, dim),\n"
      "            h=nn.ModuleList([Block(dim, heads, ratio) for _ in range(depth)]), ln_f=nn.LayerNorm(dim)))\n"
      "        self.lm_head = nn.Linear(dim, vocab, bias=False)\n"
      "        self.transformer.wte.weight = self.lm_head.weight\n"
      "    def forward(self, idx):\n"
      "        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))\n"
      "        for b in self.transformer.h: x = b(x)\n"
      "        return self.lm_head(self.transformer.ln_f(x))\n"
      "net = GPT(" + std::to_string(kVocab) + ", " + std::to_string(kT) + ", 16, 2, 2, 4)";
  std::string inputs = "idx = torch.tensor([";
  for (const float v : data.x) inputs += std::to_string(static_cast<int>(v)) + ",";
  inputs += "]).reshape(" + std::to_string(kSequences) + ", " + std::to_string(kT) + ")\ny = torch.tensor([";
  for (const std::int32_t v : data.y) inputs += std::to_string(v) + ",";
  inputs += "])";
  std::printf("[ torch    ] %lld of %lld targets counted\n", static_cast<long long>(counted),
              static_cast<long long>(kSequences * kT));
  std::string skipped;
  if (!check_model_step_against_torch(
          {net, inputs, "F.cross_entropy(net(idx).view(-1, " + std::to_string(kVocab) + "), y, ignore_index=-1)"},
          {rig.model, params, rig.grad(r), r.loss_sum / static_cast<double>(counted), eval.loss}, skipped))
    GTEST_SKIP() << skipped;
}

TEST(ModelGpt, VocabularyJsonEscapesControlCharacters) {
  // The root attribute `vocabulary` holds the fortunes' \n, \t, BEL and backspace; JSON needs them escaped.
  EXPECT_EQ(json_string("a\n\t\x07\b\"\\é"), "\"a\\u000a\\u0009\\u0007\\u0008\\\"\\\\é\"");
}
