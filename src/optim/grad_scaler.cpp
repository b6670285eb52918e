#include "optim/grad_scaler.hpp"

#include <algorithm>
#include <cmath>

namespace divsim {

bool overflows_fp16(std::span<const float> grads) {
  return std::any_of(grads.begin(), grads.end(), [](float g) { return !(std::fabs(g) <= 65504.0f); });
}

ScalerUpdate GradScaler::unscale_or_skip(std::span<float> grads, double& scale, std::int64_t& good_steps,
                                         std::optional<bool> overflow) const {
  const ScalerUpdate update{overflow.value_or(overflows_fp16(grads)), scale};
  if (update.skipped) {
    scale *= 0.5;
    good_steps = 0;
    return update;
  }
  const auto inv = static_cast<float>(1.0 / scale);
  for (float& g : grads) g *= inv;
  if (++good_steps == growth_interval_) {
    scale *= 2.0;
    good_steps = 0;
  }
  return update;
}

}  // namespace divsim
