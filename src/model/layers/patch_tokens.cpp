// A ViT's tokens from its patch embedding, timm's VisionTransformer._pos_embed with a class token
// (https://github.com/huggingface/pytorch-image-models, vision_transformer.py): inp (B, C, H, W), the
// output of the conv2d patch projection -> out (B, 1 + H W, C),
//   out[:, 0]     = cls_token + pos_embed[0]
//   out[:, 1 + p] = inp[:, :, p] + pos_embed[1 + p]    (p = h W + w, row-major: x.flatten(2).transpose(1, 2))
// No settings. Params cls_token (1, 1, C) and pos_embed (1, 1 + H W, C), both N(0, 0.02). timm draws
// pos_embed from trunc_normal_(std=.02), N(0, .02) cut at +-2 (absolute: 100 sigma, never cut in
// practice), the same distribution; for cls_token DeiT (and timm before init_weights) used that too,
// while timm's init_weights now draws it from N(0, 1e-6). No saved tensors: backward needs only dy.
// Every output element is one float add, as torch's cat-then-add, so forward gives torch's bits.
#include <algorithm>
#include <stdexcept>

#include "model/layer.hpp"

namespace divsim {
namespace {

class PatchTokens final : public Layer {
 public:
  explicit PatchTokens(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != 3)
      throw std::logic_error("layer " + s.name + " (patch_tokens) needs (C, H, W) samples, got " + to_string(in));
    c_ = in[0];
    positions_ = in[1] * in[2];
    t_ = 1 + positions_;
    set_output({t_, c_});
    add_param("cls_token", {1, 1, c_}, Init::normal(0.02));
    add_param("pos_embed", {1, t_, c_}, Init::normal(0.02));
  }

  // inp (B, C, H, W) -> out (B, 1 + H W, C)
  void forward(const Pass& p) const override {
    const float* cls = weight_of(p, 0);
    const float* pos = weight_of(p, 1);
    for (std::int64_t b = 0; b < p.rows; ++b) {
      const float* x = p.x[0] + b * c_ * positions_;
      float* y = p.y + b * t_ * c_;
      for (std::int64_t c = 0; c < c_; ++c) y[c] = cls[c] + pos[c];
      // Token-major writes, reading x with stride H W: one (B, C, HW) -> (B, HW, C) transpose.
      for (std::int64_t q = 0; q < positions_; ++q) {
        float* yt = y + (1 + q) * c_;
        const float* pt = pos + (1 + q) * c_;
        for (std::int64_t c = 0; c < c_; ++c) yt[c] = x[c * positions_ + q] + pt[c];
      }
    }
  }

  // dpos_embed (1 + HW, C) += sum over rows of dy ; dcls_token (C) += sum over rows of dy[:, 0] (the
  // chunk's rows, in order). dcls is dpos's first token: the same sums, so it takes their values.
  void backward_params(const Pass& p) const override {
    column_sums(p.dy, p.rows, t_ * c_, t_ * c_, grad_of(p, 1), p.write);
    column_sums(p.dy, p.rows, c_, t_ * c_, grad_of(p, 0), p.write);
  }

  // dinp (B, C, H, W) = dy[:, 1:] transposed back
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    for (std::int64_t b = 0; b < p.rows; ++b) {
      const float* dy = p.dy + b * t_ * c_ + c_;  // token 1
      float* dx = p.dx[0] + b * c_ * positions_;
      for (std::int64_t c = 0; c < c_; ++c)
        for (std::int64_t q = 0; q < positions_; ++q) dx[c * positions_ + q] = dy[q * c_ + c];
    }
  }

 private:
  std::int64_t c_ = 0, positions_ = 0, t_ = 0;  // channels, H W, tokens 1 + H W
};

}  // namespace

DIVSIM_REGISTER_LAYER("patch_tokens", PatchTokens);

}  // namespace divsim
