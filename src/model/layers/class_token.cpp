// The class token of a sequence, timm's VisionTransformer.forward_head with global_pool='token'
// (x[:, 0]): inp (B, T, C) -> out (B, C), the token at position 0. No parameters, no settings.
#include <algorithm>
#include <stdexcept>

#include "model/layer.hpp"

namespace divsim {
namespace {

class ClassToken final : public Layer {
 public:
  explicit ClassToken(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != 2)
      throw std::logic_error("layer " + s.name + " (class_token) needs (T, C) samples, got " + to_string(in));
    t_ = in[0];
    c_ = in[1];
    set_output({c_});
  }

  // inp (B, T, C) -> out (B, C)
  void forward(const Pass& p) const override {
    for (std::int64_t b = 0; b < p.rows; ++b) std::copy_n(p.x[0] + b * t_ * c_, c_, p.y + b * c_);
  }

  // dinp[:, 0] = dy, dinp[:, 1:] = 0
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    for (std::int64_t b = 0; b < p.rows; ++b) {
      float* dx = p.dx[0] + b * t_ * c_;
      std::copy_n(p.dy + b * c_, c_, dx);
      std::fill(dx + c_, dx + t_ * c_, 0.0f);
    }
  }

 private:
  std::int64_t t_ = 0, c_ = 0;
};

}  // namespace

DIVSIM_REGISTER_LAYER("class_token", ClassToken);

}  // namespace divsim
