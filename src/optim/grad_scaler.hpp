#pragma once
// Dynamic loss scaling as torch.cuda.amp.GradScaler does it (init_scale, growth_factor 2, backoff_factor
// 0.5, growth_interval): an element of the gradient about to be applied beyond fp16's range (65504) or
// non-finite is an overflow, which skips the step and halves the scale; otherwise the gradient is
// unscaled, and the scale doubles after growth_interval good steps in a row. The scale and the count live
// in the rank's Replica (they are checkpointed with it); this is only the rule.
#include <cstdint>
#include <optional>
#include <span>

namespace divsim {

// Whether any element is beyond fp16's range or non-finite.
bool overflows_fp16(std::span<const float> grads);

struct ScalerUpdate {
  bool skipped = false;
  double old_scale = 1.0;  // the scale the gradient carried
};

class GradScaler {
 public:
  explicit GradScaler(std::int64_t growth_interval) : growth_interval_(growth_interval) {}

  // Unscales `grads` in place, or skips the step; `overflow` decided elsewhere (a fault's local check)
  // replaces the check on `grads`. Updates scale and good_steps.
  ScalerUpdate unscale_or_skip(std::span<float> grads, double& scale, std::int64_t& good_steps,
                               std::optional<bool> overflow = std::nullopt) const;

 private:
  std::int64_t growth_interval_;
};

}  // namespace divsim
