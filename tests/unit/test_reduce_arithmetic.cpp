// dist.reduce_dtype and dist.divide: FSDP's pre-divide factor, and the mpi and ring reducers' sums in a
// 16-bit dtype and with the division moved, on 4 or 8 logical ranks in this one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "comm/reduce_arithmetic.hpp"
#include "comm/reducer.hpp"
#include "numerics/bits.hpp"

namespace divsim {
namespace {

// Gradients of W ranks with values spread over many binades (some below fp16's normal range), so
// that roundings and summation orders show.
std::vector<std::vector<float>> contributions(int W, std::size_t n) {
  std::vector<std::vector<float>> g(static_cast<std::size_t>(W), std::vector<float>(n));
  for (int r = 0; r < W; ++r)
    for (std::size_t i = 0; i < n; ++i)
      g[static_cast<std::size_t>(r)][i] =
          std::ldexp(1.0f + 0.37f * static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 29),
                     static_cast<int>(i % 40) - 30) * ((i + static_cast<std::size_t>(r)) % 3 == 0 ? -1.0f : 1.0f);
  return g;
}

// The reduced gradient of every rank (all equal is checked), through the named reducer.
std::vector<float> reduce(ReduceMode mode, ReduceArithmetic a, int W, double divisor) {
  const std::size_t n = 1000;
  ReduceLayout rl;
  rl.world_size = W;
  rl.rank_count = W;
  rl.num_params = n;
  rl.tensors = {{0, 600}, {600, 400}};
  rl.bucket_cap_mb = 0.001;  // several ring buckets
  rl.arithmetic = a;
  const auto reducer = make_reducer(mode, MPI_COMM_WORLD, rl);
  std::vector<std::vector<float>> g = contributions(W, n);  // the mpi and ring reducers lend no memory
  std::vector<std::span<float>> spans(g.begin(), g.end());
  reducer->allreduce_gradients(spans, 1, divisor);
  for (int k = 1; k < W; ++k)
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(spans[static_cast<std::size_t>(k)][i], spans[0][i]) << "rank " << k;
  return {spans[0].begin(), spans[0].begin() + static_cast<std::ptrdiff_t>(n)};
}

TEST(ReduceArithmetic, FsdpPredivideFactor) {
  // torch.distributed.fsdp._get_gradient_predivide_factor for W = 1..16
  const int want[] = {1, 2, 2, 2, 2, 4, 2, 4, 2, 4, 2, 4, 2, 4, 2, 4};
  for (int w = 1; w <= 16; ++w) EXPECT_EQ(fsdp_predivide_factor(w), want[w - 1]) << "W = " << w;
  ReduceArithmetic sqrt{ReduceDtype::fp32, DivideMode::sqrt};
  EXPECT_EQ(sqrt.pre_factor(8.0, 8), 4.0);
  EXPECT_EQ(ReduceArithmetic{}.pre_factor(8.0, 8), 1.0);
  EXPECT_EQ((ReduceArithmetic{ReduceDtype::fp32, DivideMode::before}.pre_factor(6.0, 8)), 6.0);  // the divisor
}

TEST(ReduceArithmetic, Bf16SumsAreBf16ValuesAndFollowTheMpiOrder) {
  for (const ReduceMode mode : {ReduceMode::mpi, ReduceMode::ring}) {
    const std::vector<float> got = reduce(mode, {ReduceDtype::bf16, DivideMode::after}, 4, 4.0);
    for (const float x : got) ASSERT_EQ(round_bf16(x), x);
    const std::vector<float> fp32 = reduce(mode, {}, 4, 4.0);
    EXPECT_NE(got, fp32);
  }
  // mpi on one process: the ranks in order, each contribution and each partial sum rounded, then / 4.
  const auto g = contributions(4, 1000);
  const std::vector<float> got = reduce(ReduceMode::mpi, {ReduceDtype::bf16, DivideMode::after}, 4, 4.0);
  for (std::size_t i = 0; i < got.size(); ++i) {
    float acc = round_bf16(g[0][i]);
    for (std::size_t k = 1; k < 4; ++k) acc = round_bf16(acc + round_bf16(g[k][i]));
    ASSERT_EQ(got[i], round_bf16(acc / 4.0f)) << i;
  }
}

TEST(ReduceArithmetic, Fp16FlushesTinyContributions) {
  const std::vector<float> got = reduce(ReduceMode::mpi, {ReduceDtype::fp16, DivideMode::before}, 4, 4.0);
  const auto g = contributions(4, 1000);
  for (std::size_t i = 0; i < got.size(); ++i) {
    float acc = round_fp16(round_fp16(g[0][i]) / 4.0f);
    for (std::size_t k = 1; k < 4; ++k) acc = round_fp16(acc + round_fp16(round_fp16(g[k][i]) / 4.0f));
    ASSERT_EQ(got[i], acc) << i;
  }
  std::size_t zeros = 0;
  for (const float x : got) zeros += x == 0.0f;
  EXPECT_GT(zeros, 0u);  // elements of magnitude 2^-30 .. 2^-25 leave nothing in fp16
}

// In float32 a division by a power of two is exact, so dividing before the sum gives the bits of
// dividing after it; by 3 it rounds each contribution, and the last bits move.
TEST(ReduceArithmetic, DivideBeforeIsExactForPowersOfTwoOnly) {
  for (const ReduceMode mode : {ReduceMode::mpi, ReduceMode::ring}) {
    EXPECT_EQ(reduce(mode, {ReduceDtype::fp32, DivideMode::before}, 4, 4.0), reduce(mode, {}, 4, 4.0));
    EXPECT_EQ(reduce(mode, {ReduceDtype::fp32, DivideMode::sqrt}, 8, 8.0), reduce(mode, {}, 8, 8.0));
    const std::vector<float> before = reduce(mode, {ReduceDtype::fp32, DivideMode::before}, 4, 3.0);
    const std::vector<float> after = reduce(mode, {}, 4, 3.0);
    EXPECT_NE(before, after);
    // Rounding-sized: within a few float32 ulps of the largest contribution (sums may cancel).
    const auto g = contributions(4, after.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      float largest = 0.0f;
      for (const auto& c : g) largest = std::max(largest, std::abs(c[i]));
      ASSERT_NEAR(before[i], after[i], largest * 1e-6f) << i;
    }
  }
}

}  // namespace
}  // namespace divsim
