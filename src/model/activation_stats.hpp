#pragma once
// Summary statistics of an activation or its gradient (seed 000 §3.2's hooks), recorded under /layers.
#include <span>

#include "model/tensor.hpp"

namespace divsim {

// mean, std, min, max, l2 over all elements of a.
inline constexpr int kStatCount = 5;
void activation_stats(ConstMatView a, std::span<double, kStatCount> out);

}  // namespace divsim
