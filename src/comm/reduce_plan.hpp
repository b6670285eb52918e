#pragma once
// The planning that belongs to the deterministic reduction: the size of its fixed chunks of samples and
// the fixed tree in which comm/tree_reducer.cpp sums them.
#include <cstdint>
#include <span>

#include "comm/reducer.hpp"  // ReduceLayout

namespace divsim {

// The world sizes whose runs a deterministic run stays bitwise comparable with by default.
inline constexpr int kComparableWorldSizes[] = {1, 2, 3, 4, 6, 8};

// Deterministic chunk size. It must be the same at every world size to be compared, so the automatic
// choice (configured = dist.det_chunk = 0) does not depend on this run's W: the largest c <= 64 that
// divides `micro_batch` and every one of `comparable` (the per-rank micro-batch at each world size of
// kComparableWorldSizes that can split the batch, as planned for that W, so a derived accumulation count
// is taken into account; empty with batch.per_rank fixed, where there is no such invariance to keep).
// ConfigError (dist.det_chunk) when the chunk does not divide the micro-batch.
std::int64_t deterministic_chunk(std::int64_t configured, std::int64_t micro_batch, int world_size,
                                 std::span<const std::int64_t> comparable);

// Deterministic mode's fixed tree, when the step's C chunks are a power of two (else the fixed-point sum
// takes the step, at every world size alike: C does not depend on W): fills layout.tree_slots and
// layout.tree_block (comm/reduce_plan.cpp says how).
void plan_tree(ReduceLayout& layout, bool distributed, std::size_t chunks_per_micro, std::size_t micro_steps);

}  // namespace divsim
