// Global-norm clipping of the flat gradient buffer (see clip.hpp).
#include "optim/clip.hpp"

#include <cmath>

namespace divsim {

double l2_norm(std::span<const float> v) {
  double sum = 0.0;
  for (const float x : v) sum += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(sum);
}

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
