#pragma once
// The fixed pairwise tree of the deterministic reduction: ((l0 + l1) + (l2 + l3)) + ... over a
// power-of-two number of float arrays, element by element, in float32. Its bits depend only on the
// leaves and their order (IEEE addition is commutative, so only the grouping counts), which is what
// lets ranks that hold whole subtrees finish the sum after an exchange with the bits of one process
// summing every leaf.
#include <cstddef>
#include <span>

namespace divsim {

// out[i] = the pairwise sum of leaves[0][i], leaves[1][i], ... in that order; leaves.size() must be a
// power of two (throws std::logic_error otherwise). out may be any of the leaves: each block of elements
// is read from every leaf before it is written.
void pairwise_sum(std::span<const float* const> leaves, std::size_t n, float* out);

}  // namespace divsim
