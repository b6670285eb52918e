#pragma once
// Global-norm gradient clipping on the flat gradient buffer, as torch.nn.utils.clip_grad_norm_
// (norm_type 2, error_if_nonfinite False) does it. Not here: other norm types, per-layer clipping.
#include <span>

namespace divsim {

// Sum of (scale * v_i)^2 in double, in 32 partial sums of a fixed pattern combined in a fixed order
// (deterministic, independent of the process layout, and vectorisable).
double sum_of_squares(std::span<const float> v, double scale = 1.0);
// L2 norm of v: sqrt(sum_of_squares(v)).
double l2_norm(std::span<const float> v);

// Returns the global L2 norm of grads before clipping. If max_norm > 0, computes torch's
// clip_coef = max_norm / (norm + 1e-6) and, when it is below 1 (or NaN, for a non-finite norm),
// multiplies grads in place by float(clip_coef): only norm + 1e-6 <= max_norm leaves grads untouched.
double clip_grad_norm(std::span<float> grads, double max_norm);

}  // namespace divsim
