// GELU, https://pytorch.org/docs/stable/generated/torch.nn.GELU.html, elementwise:
// inp (B, ...) -> out (B, ...). Setting tanh: 0 (default) the exact form x * Phi(x), Phi the standard
// normal CDF (approximate='none'); 1 the tanh approximation 0.5 x (1 + tanh(u)),
// u = sqrt(2/pi) (x + 0.044715 x^3) (approximate='tanh'). No params; backward reads the input again
// instead of saving anything.
// The tanh form is evaluated as x * sigmoid(2u) = x / (1 + e^(-2u)), the same function without the
// cancellation of 1 + tanh(u) for large negative u. Phi and e^x come from numerics/branchless_math.hpp,
// so the loops vectorise (libm's erff and expf would cost 10-30x more per element).
#include <cmath>

#include "model/layer.hpp"
#include "numerics/branchless_math.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

constexpr float kSqrt2OverPi = 0x1.988454p-1f;   // sqrt(2 / pi)
constexpr float kInvSqrt2Pi = 0x1.988454p-2f;    // 1 / sqrt(2 pi), the normal density at 0
constexpr float kCubic = 0.044715f;

class Gelu final : public Layer {
 public:
  explicit Gelu(const LayerSpec& s) : Layer(s) {
    tanh_ = s.option("tanh", 0.0) != 0.0;
    set_output(input_shapes().at(0));
  }

  // inp (B, ...) -> out (B, ...)
  DIVSIM_WIDE_VECTORS void forward(const Pass& p) const override {
    const std::int64_t n = p.rows * out_features();
    const float* x = p.x[0];
    float* y = p.y;
    if (tanh_) {
      for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_branchless(-2.0f * inner(x[i])));
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf_branchless(x[i]);
    }
  }

  // dinp = dout * gelu'(inp): Phi(x) + x phi(x) exact; s + 2 x s (1 - s) u'(x) with s = sigmoid(2u) for tanh
  DIVSIM_WIDE_VECTORS void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const std::int64_t n = p.rows * out_features();
    const float* x = p.x[0];
    const float* dy = p.dy;
    float* dx = p.dx[0];
    if (tanh_) {
      for (std::int64_t i = 0; i < n; ++i) {
        const float e = exp_branchless(-2.0f * inner(x[i]));
        const float s = 1.0f / (1.0f + e);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x[i] * x[i]);
        dx[i] = dy[i] * (s + 2.0f * x[i] * s * (e * s) * du);  // 1 - s = e s, without cancellation
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        const float density = kInvSqrt2Pi * exp_branchless(-0.5f * x[i] * x[i]);
        dx[i] = dy[i] * (normal_cdf_branchless(x[i]) + x[i] * density);
      }
    }
  }

 private:
  static float inner(float x) { return kSqrt2OverPi * (x + kCubic * x * x * x); }
  bool tanh_ = false;
};

}  // namespace

DIVSIM_REGISTER_LAYER("gelu", Gelu);

}  // namespace divsim
