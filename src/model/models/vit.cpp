// model.type = vit: a Vision Transformer for images, timm's VisionTransformer (class token, learned
// position embeddings, pre-norm blocks) at Fashion-MNIST scale:
//   patch_embed.proj  Conv2d(C, dim, kernel = stride = patch): one token per patch
//   tokens            class token prepended, position embeddings added (patch_tokens)
//   blocks.<i>        x = x + [drop](attn.proj(attention(attn.qkv(norm1(x)))))
//                     x = x + [drop](mlp.fc2(GELU(mlp.fc1(norm2(x)))))        for i < model.depth
//   norm              LayerNorm
//   cls               the class token's row (x[:, 0])
//   head              Linear(dim, classes)
// Settings: model.patch (must divide the image's height and width), dim, heads, depth, mlp_ratio, dropout.
// State-dict names are timm's (patch_embed.proj.weight, blocks.0.attn.qkv.weight, norm.bias,
// head.weight, ...) except the class token and the position embeddings, which a layer's scope puts under
// tokens. (tokens.cls_token, tokens.pos_embed; timm's are top-level cls_token, pos_embed).
// Differences from timm, where divsim follows PyTorch's own modules instead:
//   - LayerNorm eps is nn.LayerNorm's default 1e-5 (timm's ViT passes 1e-6);
//   - Linear and Conv2d weights start as PyTorch's defaults (U(+-1/sqrt(fan_in)), biases too), not timm's
//     trunc_normal(.02) weights with zero biases; cls_token and pos_embed are N(0, .02) (patch_tokens.cpp);
//   - GELU is the exact (erf) form, as timm's nn.GELU default;
//   - model.dropout drops after attn.proj and after mlp.fc2 only (timm's proj_drop and the Mlp's second
//     drop); timm's pos_drop, attn_drop and the Mlp's drop after the activation, and drop_path, are absent.
#include <string>

#include "config/config_error.hpp"
#include "model/model.hpp"

namespace divsim {
namespace {

void build_vit(ModelBuilder& b) {
  const ModelSection& c = b.config;
  const Shape& image = b.shape(ModelBuilder::input());
  if (image.size() != 3)
    throw ConfigError("model.type",
                      "vit needs images (data.source=fashion-mnist, or hdf5 with [N, height, width] images)");
  if (image[1] % c.patch != 0 || image[2] % c.patch != 0)
    throw ConfigError("model.patch", std::to_string(c.patch) + " does not divide the " + std::to_string(image[1]) +
                                         "x" + std::to_string(image[2]) + " images");
  const auto dim = static_cast<double>(c.dim);
  const double patch = static_cast<double>(c.patch);
  const std::map<std::string, double> ln = {{"eps", 1e-5}};

  int x = b.add("conv2d", "patch_embed.proj", {ModelBuilder::input()},
                {{"out", dim}, {"kernel", patch}, {"stride", patch}, {"padding", 0}, {"bias", 1}});
  x = b.add("patch_tokens", "tokens", {x});
  for (std::int64_t i = 0; i < c.depth; ++i) {
    const std::string n = "blocks." + std::to_string(i);
    int h = b.add("layernorm", n + ".norm1", {x}, ln);
    h = b.add("linear", n + ".attn.qkv", {h}, {{"out", 3 * dim}});
    h = b.add("attention", n + ".attn", {h}, {{"heads", static_cast<double>(c.heads)}, {"causal", 0}});
    h = b.add("linear", n + ".attn.proj", {h}, {{"out", dim}});
    if (c.dropout > 0.0) h = b.add("dropout", n + ".attn.drop", {h}, {{"p", c.dropout}});
    x = b.add("add", n + ".add1", {x, h});
    h = b.add("layernorm", n + ".norm2", {x}, ln);
    h = b.add("linear", n + ".mlp.fc1", {h}, {{"out", static_cast<double>(c.mlp_ratio) * dim}});
    h = b.add("gelu", n + ".mlp.act", {h}, {{"tanh", 0}});
    h = b.add("linear", n + ".mlp.fc2", {h}, {{"out", dim}});
    if (c.dropout > 0.0) h = b.add("dropout", n + ".mlp.drop", {h}, {{"p", c.dropout}});
    x = b.add("add", n + ".add2", {x, h});
  }
  x = b.add("layernorm", "norm", {x}, ln);
  x = b.add("class_token", "cls", {x});
  x = b.add("linear", "head", {x}, {{"out", static_cast<double>(b.classes)}});

  // Evaluation keeps one buffer of eval_batch rows per activation: about 80k floats a sample for the
  // defaults (dim 64, depth 4, 17 tokens), ~1.4M at dim 384, depth 12. Budget 64M floats (256 MB).
  b.eval_batch_within(std::int64_t{64} << 20);
}

}  // namespace

DIVSIM_REGISTER_MODEL("vit", build_vit);

}  // namespace divsim
