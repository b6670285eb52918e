#include "comm/reduce_plan.hpp"

#include <bit>
#include <numeric>
#include <string>

#include "config/config_error.hpp"

namespace divsim {

std::int64_t deterministic_chunk(std::int64_t configured, std::int64_t micro_batch, int world_size,
                                 std::span<const std::int64_t> comparable) {
  std::int64_t c = configured;
  if (c == 0) {
    std::int64_t g = micro_batch;
    for (const std::int64_t m : comparable) g = std::gcd(g, m);
    c = 1;
    for (std::int64_t d = 64; d >= 1; --d)
      if (g % d == 0) {
        c = d;
        break;
      }
  }
  if (micro_batch % c != 0)
    throw ConfigError("dist.det_chunk", std::to_string(c) + " does not divide the per-rank micro-batch " +
                                            std::to_string(micro_batch) + " at world size " +
                                            std::to_string(world_size) + "; choose a divisor of it");
  return c;
}

namespace {

// bit_reverse(x, k): x's log2(k) low bits in reverse order (k a power of two).
std::size_t bit_reverse(std::size_t x, std::size_t k) {
  std::size_t r = 0;
  for (std::size_t bit = 1; bit < k; bit <<= 1, x >>= 1) r = (r << 1) | (x & 1);
  return r;
}

}  // namespace

// Deterministic mode's fixed tree (comm/tree_reducer.cpp), when the step's C chunks are a power of two
// (else the fixed-point sum takes the step, at every world size alike: C does not depend on W). A
// chunk's place among the tree's C leaves follows from the global positions it holds, so it is the same
// at every world size, and each rank's chunks are one subtree of L = C / W leaves:
// - global_batch: chunk i of the step holds positions [i c, (i + 1) c): place i; rank g's places are
//   [g L, (g + 1) L), its part m Q + q (micro-step m, chunk q of Q) at place g L + m Q + q.
// - distributed: chunk (micro-step m, start s) holds positions m G/M + s + t S, t < c, with S = G / (M c)
//   starts; rank g's chunks have s = g + q W, and place bit_reverse(s, S) M + m = bit_reverse(g, W) L +
//   bit_reverse(q, Q) M + m puts them at rank position bit_reverse(g, W).
void plan_tree(ReduceLayout& layout, bool distributed, std::size_t chunks_per_micro, std::size_t micro_steps) {
  const auto W = static_cast<std::size_t>(layout.world_size), Q = chunks_per_micro, M = micro_steps;
  if (!std::has_single_bit(W * Q * M)) return;
  const std::size_t L = Q * M;
  for (std::size_t i = 0; i < L; ++i)
    layout.tree_slots.push_back(static_cast<int>(distributed ? (i % M) * Q + bit_reverse(i / M, Q) : i));
  for (std::size_t g = 0; g < W; ++g) layout.tree_block.push_back(static_cast<int>(distributed ? bit_reverse(g, W) : g));
}

}  // namespace divsim
