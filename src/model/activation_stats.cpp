#include "model/activation_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "numerics/simd.hpp"

namespace divsim {

DIVSIM_WIDE_VECTORS void activation_stats(ConstMatView a, std::span<double, kStatCount> out) {
  // 32 lanes of partial sums, minima and maxima in a fixed pattern, combined in a fixed order: one
  // chain of dependent additions is latency-bound (8 lanes, one vector, ran 5x slower than 32).
  constexpr std::size_t kLanes = 32;
  double sum[kLanes] = {}, sum2[kLanes] = {}, lo[kLanes], hi[kLanes];
  std::fill_n(lo, kLanes, std::numeric_limits<double>::infinity());
  std::fill_n(hi, kLanes, -std::numeric_limits<double>::infinity());
  const float* v = a.data();
  const auto n = static_cast<std::size_t>(a.size());
  const std::size_t body = n - n % kLanes;
  auto add = [&](std::size_t k, double x) {
    sum[k] += x;
    sum2[k] += x * x;
    lo[k] = std::min(lo[k], x);
    hi[k] = std::max(hi[k], x);
  };
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) add(k, v[i + k]);
  for (std::size_t i = body; i < n; ++i) add(i - body, v[i]);
  for (std::size_t k = 1; k < kLanes; ++k) {
    sum[0] += sum[k];
    sum2[0] += sum2[k];
    lo[0] = std::min(lo[0], lo[k]);
    hi[0] = std::max(hi[0], hi[k]);
  }
  const double count = static_cast<double>(n);
  const double mean = n > 0 ? sum[0] / count : 0.0;
  out[0] = mean;
  out[1] = n > 0 ? std::sqrt(std::max(0.0, sum2[0] / count - mean * mean)) : 0.0;
  out[2] = n > 0 ? lo[0] : 0.0;
  out[3] = n > 0 ? hi[0] : 0.0;
  out[4] = std::sqrt(sum2[0]);
}

}  // namespace divsim
