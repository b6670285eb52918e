#include "numerics/pairwise_sum.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

namespace divsim {

void pairwise_sum(std::span<const float* const> leaves, std::size_t n, float* out) {
  const std::size_t count = leaves.size();
  constexpr std::size_t kMaxDepth = 24;  // 2^24 leaves
  if (!std::has_single_bit(count) || std::countr_zero(count) > static_cast<int>(kMaxDepth))
    throw std::logic_error("pairwise_sum: " + std::to_string(count) + " leaves (needs a power of two up to 2^24)");
  if (count == 1) {
    if (out != leaves[0]) std::copy_n(leaves[0], n, out);
    return;
  }
  // Block by block, so that every leaf is read once from memory and the tree's sums stay in L1. The
  // leaves come in pairs; after pair j (leaves j - 1, j), a binary counter: a subtree of 2^d leaves
  // waits in pending[d] for its right sibling while bit d of j is set. Pair j's sum climbs through
  // them into the first free level, pending[F] (F = trailing ones of j), or into out for the last pair.
  constexpr std::size_t kBlock = 256;
  alignas(64) float pending[kMaxDepth + 1][kBlock];
  for (std::size_t lo = 0; lo < n; lo += kBlock) {
    const std::size_t m = std::min(kBlock, n - lo);
    for (std::size_t j = 1; j < count; j += 2) {
      const auto top = static_cast<std::size_t>(std::countr_one(j));
      float* t = j + 1 == count ? out + lo : pending[top];
      const float* a = leaves[j - 1] + lo;
      const float* b = leaves[j] + lo;
      for (std::size_t i = 0; i < m; ++i) t[i] = a[i] + b[i];
      for (std::size_t level = 1; level < top; ++level)  // left sibling + right
        for (std::size_t i = 0; i < m; ++i) t[i] = pending[level][i] + t[i];
    }
  }
}

}  // namespace divsim
