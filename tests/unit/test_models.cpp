// Registered models as graphs (model/models/): the layers, state_dict keys and wiring they build, and one
// whole forward + backward through the step engine against the same network written in PyTorch.
// (The mlp's own tests are in test_layers.cpp and test_engine.cpp.)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "config/config_error.hpp"
#include "engine_rig.hpp"
#include "model/model.hpp"
#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

namespace {

ModelSection vit_cfg(double dropout = 0.0) {
  ModelSection c;
  c.type = "vit";
  c.depth = 2;
  c.dim = 16;
  c.heads = 2;
  c.patch = 7;
  c.mlp_ratio = 4;
  c.dropout = dropout;
  return c;
}

std::vector<std::string> layer_names(const Model& m) {
  std::vector<std::string> names;
  for (const Node& n : m.nodes()) names.push_back(n.layer->name());
  return names;
}

// The index of the layer called `name` (fails the test when there is none).
std::size_t layer_index(const Model& m, const std::string& name) {
  for (std::size_t l = 0; l < m.size(); ++l)
    if (m.layer(l).name() == name) return l;
  ADD_FAILURE() << "no layer " << name;
  return 0;
}

}  // namespace

TEST(ModelVit, TimmNamesShapesAndResidualWiring) {
  // depth 2, dim 16, 2 heads, 7x7 patches of 28x28 images: 16 patches + the class token = 17 tokens.
  const Model m(vit_cfg(), {1, 28, 28}, 10);
  std::vector<std::string> want_layers = {"patch_embed.proj", "tokens"};
  std::vector<std::string> want_styles = {"conv2d", "patch_tokens"};
  for (const std::string b : {"blocks.0", "blocks.1"}) {
    for (const char* l : {".norm1", ".attn.qkv", ".attn", ".attn.proj", ".add1", ".norm2", ".mlp.fc1", ".mlp.act",
                          ".mlp.fc2", ".add2"})
      want_layers.push_back(b + l);
    for (const char* s :
         {"layernorm", "linear", "attention", "linear", "add", "layernorm", "linear", "gelu", "linear", "add"})
      want_styles.emplace_back(s);
  }
  for (const char* l : {"norm", "cls", "head"}) want_layers.emplace_back(l);
  for (const char* s : {"layernorm", "class_token", "linear"}) want_styles.emplace_back(s);
  EXPECT_EQ(layer_names(m), want_layers);
  std::vector<std::string> styles;
  for (const Node& n : m.nodes()) styles.push_back(n.layer->style());
  EXPECT_EQ(styles, want_styles);

  struct Want {
    std::string key;
    Shape shape;
  };
  std::vector<Want> want = {{"patch_embed.proj.weight", {16, 1, 7, 7}}, {"patch_embed.proj.bias", {16}},
                            {"tokens.cls_token", {1, 1, 16}},           {"tokens.pos_embed", {1, 17, 16}}};
  for (const std::string b : {"blocks.0", "blocks.1"}) {
    const std::vector<Want> block = {{b + ".norm1.weight", {16}},      {b + ".norm1.bias", {16}},
                                     {b + ".attn.qkv.weight", {48, 16}}, {b + ".attn.qkv.bias", {48}},
                                     {b + ".attn.proj.weight", {16, 16}}, {b + ".attn.proj.bias", {16}},
                                     {b + ".norm2.weight", {16}},      {b + ".norm2.bias", {16}},
                                     {b + ".mlp.fc1.weight", {64, 16}}, {b + ".mlp.fc1.bias", {64}},
                                     {b + ".mlp.fc2.weight", {16, 64}}, {b + ".mlp.fc2.bias", {16}}};
    want.insert(want.end(), block.begin(), block.end());
  }
  want.push_back({"norm.weight", {16}});
  want.push_back({"norm.bias", {16}});
  want.push_back({"head.weight", {10, 16}});
  want.push_back({"head.bias", {10}});
  ASSERT_EQ(m.tensors().size(), want.size());
  std::size_t offset = 0;
  for (std::size_t t = 0; t < want.size(); ++t) {
    const ParamTensor& p = m.tensors()[t];
    EXPECT_EQ(p.key(), want[t].key);
    EXPECT_EQ(p.shape, want[t].shape) << want[t].key;
    EXPECT_EQ(p.offset, offset) << want[t].key << ": contiguous, in graph order";
    offset += p.size;
  }
  EXPECT_EQ(m.num_params(), offset);
  const std::size_t block = 4 * 16 + 48 * 16 + 48 + 16 * 16 + 16 + 64 * 16 + 64 + 16 * 64 + 16;
  EXPECT_EQ(m.num_params(), 16u * 49 + 16 + 16 + 17 * 16 + 2 * block + 2 * 16 + 10 * 16 + 10);
  EXPECT_EQ(m.num_buffers(), 0u);
  EXPECT_FALSE(m.has_batch_statistics());

  // Activation shapes along the way, and the classifier reading the class token.
  EXPECT_EQ(m.activations()[m.nodes()[layer_index(m, "patch_embed.proj")].output], (Shape{16, 4, 4}));
  EXPECT_EQ(m.activations()[m.nodes()[layer_index(m, "tokens")].output], (Shape{17, 16}));
  EXPECT_EQ(m.activations()[m.nodes()[layer_index(m, "blocks.0.attn.qkv")].output], (Shape{17, 48}));
  EXPECT_EQ(m.activations()[m.nodes()[layer_index(m, "blocks.0.mlp.fc1")].output], (Shape{17, 64}));
  EXPECT_EQ(m.activations()[m.nodes()[layer_index(m, "cls")].output], (Shape{16}));

  // Pre-norm residual blocks: each block's input feeds norm1 and the first add, whose output feeds norm2
  // and the second add; nothing else reads them.
  int block_input = m.nodes()[layer_index(m, "tokens")].output;
  for (const std::string b : {"blocks.0", "blocks.1"}) {
    auto node = [&](const std::string& l) -> const Node& { return m.nodes()[layer_index(m, b + l)]; };
    EXPECT_EQ(node(".norm1").inputs, std::vector<int>{block_input}) << b;
    EXPECT_EQ(node(".add1").inputs, (std::vector<int>{block_input, node(".attn.proj").output})) << b;
    EXPECT_EQ(node(".norm2").inputs, std::vector<int>{node(".add1").output}) << b;
    EXPECT_EQ(node(".add2").inputs, (std::vector<int>{node(".add1").output, node(".mlp.fc2").output})) << b;
    EXPECT_EQ(m.readers(block_input), 2) << b;
    EXPECT_EQ(m.readers(node(".add1").output), 2) << b;
    EXPECT_EQ(node(".attn").layer->option("heads", 0), 2) << b;
    EXPECT_EQ(node(".attn").layer->option("causal", 1), 0) << b << ": ViT attends to every token";
    EXPECT_EQ(node(".mlp.act").layer->option("tanh", 1), 0) << b << ": exact (erf) GELU";
    EXPECT_EQ(node(".norm1").layer->option("eps", 0), 1e-5) << b << ": nn.LayerNorm's default";
    block_input = node(".add2").output;
  }
  EXPECT_EQ(m.nodes()[layer_index(m, "norm")].inputs, std::vector<int>{block_input});
  EXPECT_EQ(m.logits(), m.nodes()[layer_index(m, "head")].output);

  // Eval activations: within 256 MB for this model and for the default one (dim 64, depth 4).
  const Model defaults([] { ModelSection c; c.type = "vit"; return c; }(), {1, 28, 28}, 10);
  for (const Model* v : {&m, &defaults}) {
    EXPECT_GE(v->eval_batch(), 10);
    EXPECT_LE(v->eval_batch(), 1000);
    EXPECT_LE(v->eval_batch() * v->activation_floats() * 4, std::int64_t{256} << 20);
  }
  std::printf("[ vit      ] %zu params, %lld activation floats a sample, eval batch %lld (defaults: %zu, %lld, %lld)\n",
              m.num_params(), static_cast<long long>(m.activation_floats()), static_cast<long long>(m.eval_batch()),
              defaults.num_params(), static_cast<long long>(defaults.activation_floats()),
              static_cast<long long>(defaults.eval_batch()));
}

TEST(ModelVit, DropoutAfterTheProjectionsInsideTheResidualBranches) {
  const Model m(vit_cfg(0.1), {1, 28, 28}, 10);
  EXPECT_EQ(m.size(), 2u + 2 * 12 + 3);
  for (const std::string b : {"blocks.0", "blocks.1"}) {
    auto node = [&](const std::string& l) -> const Node& { return m.nodes()[layer_index(m, b + l)]; };
    EXPECT_EQ(node(".attn.drop").layer->style(), "dropout");
    EXPECT_EQ(node(".attn.drop").inputs, std::vector<int>{node(".attn.proj").output});
    EXPECT_EQ(node(".add1").inputs[1], node(".attn.drop").output);
    EXPECT_EQ(node(".mlp.drop").inputs, std::vector<int>{node(".mlp.fc2").output});
    EXPECT_EQ(node(".add2").inputs[1], node(".mlp.drop").output);
    EXPECT_EQ(node(".mlp.drop").layer->option("p", 0), 0.1);
  }
  // Dropout has no parameters: the state_dict is the same as without it.
  EXPECT_EQ(m.num_params(), Model(vit_cfg(), {1, 28, 28}, 10).num_params());
}

TEST(ModelVit, RejectsPatchesThatDoNotTileTheImageAndNonImages) {
  ModelSection c = vit_cfg();
  c.patch = 5;
  try {
    const Model m(c, {1, 28, 28}, 10);
    ADD_FAILURE() << "patch 5 on 28x28 images was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.patch") << e.what();
  }
  c.patch = 4;
  EXPECT_NO_THROW(Model(c, {1, 28, 32}, 10)) << "4 divides 28 and 32";
  try {
    const Model m(vit_cfg(), {784}, 10);
    ADD_FAILURE() << "flat features were accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.type") << e.what();
  }
}

TEST(ModelVit, OneStepMatchesPyTorch) {
  // The depth-2 ViT above on six random 28x28 single-channel images, one micro-batch through the
  // mpi-mode engine (grad_scale 1/6, one chunk), vs the same network written in torch from timm's
  // definitions and loaded with divsim's initial parameters by state_dict key: the mean cross-entropy,
  // every parameter gradient (1e-5 of each tensor's largest |grad|), and the eval loss (eval mode's
  // streaming attention) with the same parameters.
  constexpr std::int64_t kImages = 6;
  const Dataset data = make_images(kImages, 28, 28, 10, 5);
  RigSpec spec{vit_cfg()};
  spec.micro = kImages;
  Rig rig(spec, data);
  Replica& r = rig.replicas[0];
  const std::vector<float> params = r.params;
  rig.run_step(0, {range(0, kImages)});
  rig.reduce(1.0);
  const EvalResult eval = rig.engine.evaluate(r, data);

  const std::string net =
      "class PatchEmbed(nn.Module):\n"
      "    def __init__(self, dim, patch):\n"
      "        super().__init__()\n"
      "        self.proj = nn.Conv2d(1, dim, patch, stride=patch)\n"
      "class Tokens(nn.Module):\n"
      "    def __init__(self, dim, tokens):\n"
      "        super().__init__()\n"
      "        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))\n"
      "        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, dim))\n"
      "    def forward(self, x):\n"
      "        x = x.flatten(2).transpose(1, 2)\n"
      "        return torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed\n"
      "class Attention(nn.Module):\n"
      "    def __init__(self, dim, heads):\n"
      "        super().__init__()\n"
      "        self.heads = heads\n"
      "        self.qkv = nn.Linear(dim, 3 * dim)\n"
      "        self.proj = nn.Linear(dim, dim)\n"
      "    def forward(self, x):\n"
      "        B, T, C = x.shape\n"
      "        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)\n"
      "        att = (q @ k.transpose(-2, -1) * (C // self.heads) ** -0.5).softmax(dim=-1)\n"
      "        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))\n"
      "class Mlp(nn.Module):\n"
      "    def __init__(self, dim, hidden):\n"
      "        super().__init__()\n"
      "        self.fc1 = nn.Linear(dim, hidden)\n"
      "        self.act = nn.GELU()\n"
      "        self.fc2 = nn.Linear(hidden, dim)\n"
      "    def forward(self, x): return self.fc2(self.act(self.fc1(x)))\n"
      "class Block(nn.Module):\n"
      "    def __init__(self, dim, heads, ratio):\n"
      "        super().__init__()\n"
      "        self.norm1 = nn.LayerNorm(dim, eps=1e-5)\n"
      "        self.attn = Attention(dim, heads)\n"
      "        self.norm2 = nn.LayerNorm(dim, eps=1e-5)\n"
      "        self.mlp = Mlp(dim, ratio * dim)\n"
      "    def forward(self, x):\n"
      "        x = x + self.attn(self.norm1(x))\n"
      "        return x + self.mlp(self.norm2(x))\n"
      "class ViT(nn.Module):\n"
      "    def __init__(self, side, patch, dim, depth, heads, ratio, classes):\n"
      "        super().__init__()\n"
      "        self.patch_embed = PatchEmbed(dim, patch)\n"
      "        self.tokens = Tokens(dim, 1 + (side // patch) ** 2)\n"
      "        self.blocks = nn.ModuleList([Block(dim, heads, ratio) for _ in range(depth)])\n"
      "        self.norm = nn.LayerNorm(dim, eps=1e-5)\n"
      "        self.head = nn.Linear(dim, classes)\n"
      "    def forward(self, x):\n"
      "        x = self.tokens(self.patch_embed.proj(x))\n"
      "        for b in self.blocks: x = b(x)\n"
      "        return self.head(self.norm(x)[:, 0])\n"
      "net = ViT(28, 7, 16, 2, 2, 4, 10)";
  std::string inputs = "x = torch.tensor(h('" + hex_list(data.x) + "'), dtype=torch.float32).reshape(" +
                       std::to_string(kImages) + ", 1, 28, 28)\ny = torch.tensor([";
  for (const std::int32_t v : data.y) inputs += std::to_string(v) + ",";
  inputs += "])";
  std::string skipped;
  if (!check_model_step_against_torch({net, inputs, "F.cross_entropy(net(x), y)"},
                                      {rig.model, params, rig.grad(r), r.loss_sum / kImages, eval.loss}, skipped))
    GTEST_SKIP() << skipped;
}
