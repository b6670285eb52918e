// Global-norm clipping of the flat gradient buffer (see clip.hpp).
#include "optim/clip.hpp"

#include <cmath>

#include "numerics/simd.hpp"

namespace divsim {

namespace {
// 32 partial sums in a fixed pattern (vectorisable: one serial chain of dependent additions is
// ten times slower), combined in a fixed order. square(x) is (x * scale)^2 in double.
template <class Square>
DIVSIM_WIDE_VECTORS double lane_sum(std::span<const float> v, Square square) {
  constexpr std::size_t kLanes = 32;
  double lane[kLanes] = {};
  const std::size_t body = v.size() - v.size() % kLanes;
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] += square(v[i + k]);
  for (std::size_t i = body; i < v.size(); ++i) lane[i - body] += square(v[i]);
  for (std::size_t width = kLanes / 2; width > 0; width /= 2)
    for (std::size_t k = 0; k < width; ++k) lane[k] += lane[k + width];
  return lane[0];
}
}  // namespace

double sum_of_squares(std::span<const float> v, double scale) {
  // x * 1.0 is x: the unscaled sums (every fault-free norm) skip a multiply per element.
  if (scale == 1.0)
    return lane_sum(v, [](float x) {
      const double s = x;
      return s * s;
    });
  return lane_sum(v, [scale](float x) {
    const double s = static_cast<double>(x) * scale;
    return s * s;
  });
}

double l2_norm(std::span<const float> v) { return std::sqrt(sum_of_squares(v)); }

double clip_grad_norm(std::span<float> grads, double max_norm) {
  const double norm = l2_norm(grads);
  if (max_norm <= 0.0) return norm;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1, then grad.mul_(coef).
  // Multiplying by exactly 1 changes nothing, so only a coefficient below 1 is applied; a NaN one
  // (non-finite norm) fails the test and is applied too, poisoning the gradients as torch does
  // without error_if_nonfinite. The coefficient is computed in double, torch's in float32: <= 1 ulp apart.
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  const auto c = static_cast<float>(coef);
  for (float& g : grads) g *= c;
  return norm;
}

}  // namespace divsim
