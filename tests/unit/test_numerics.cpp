#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "config/run_config.hpp"
#include "numerics/bits.hpp"
#include "numerics/pairwise_sum.hpp"
#include "numerics/philox.hpp"

using namespace divsim;

TEST(Philox, MatchesRandom123KnownAnswer) {
  // Known-answer vectors from Random123's kat_vectors (philox4x32 10 rounds).
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(KeyedStream, PureFunctionOfKeyAndCounter) {
  const KeyedStream a(7, Stream::dropout, 1, 2, 3), b(7, Stream::dropout, 1, 2, 3);
  const KeyedStream other_purpose(7, Stream::augment, 1, 2, 3), other_word(7, Stream::dropout, 1, 2, 4);
  int same_purpose = 0, same_word = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.u32(i), b.u32(i));
    same_purpose += a.u32(i) == other_purpose.u32(i);
    same_word += a.u32(i) == other_word.u32(i);
  }
  EXPECT_LT(same_purpose, 3);
  EXPECT_LT(same_word, 3);
}

TEST(KeyedStream, UniformAndNormalMoments) {
  const KeyedStream s(123, Stream::init);
  const int n = 200000;
  double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = s.uniform(static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
    const double z = s.normal(static_cast<std::uint64_t>(i));
    nsum += z;
    nsum2 += z * z;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum2 / n - 0.25, 1.0 / 12.0, 0.002);
  EXPECT_NEAR(nsum / n, 0.0, 0.01);
  EXPECT_NEAR(nsum2 / n, 1.0, 0.02);
}

TEST(KeyedStream, BelowIsInRangeAndCoversIt) {
  const KeyedStream s(5, Stream::sampler);
  std::vector<int> seen(10, 0);
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const auto v = s.below(i, 10);
    ASSERT_LT(v, 10u);
    ++seen[v];
  }
  for (int c : seen) EXPECT_GT(c, 850);
}

// The rules on hand-picked cases; validation/rounding.py checks every class of bit pattern against
// PyTorch's conversions and the PTX rule.
TEST(Precision, Tf32RoundsToNearestTiesAwayFromZero) {
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: cvt.rna goes away from zero (nearest even
  // would give 1.0).
  EXPECT_EQ(round_tf32(1.0f + 0x1.0p-11f), 1.0f + 0x1.0p-10f);
  EXPECT_EQ(round_tf32(-1.0f - 0x1.0p-11f), -1.0f - 0x1.0p-10f);
  EXPECT_EQ(round_tf32(1.0f + 0x1.fp-12f), 1.0f);                       // below half: down
  EXPECT_EQ(round_tf32(1.0f + 0x1.8p-11f), 1.0f + 0x1.0p-10f);          // above half: up
  // The result has no bits below the 10th mantissa bit.
  const float r = round_tf32(3.14159265f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(r) & 0x1fffu, 0u);
  EXPECT_NEAR(r, 3.14159265f, 3.14159265f * 0x1.0p-11f);
  EXPECT_TRUE(std::isinf(round_tf32(INFINITY)));
  EXPECT_TRUE(std::isinf(round_tf32(std::numeric_limits<float>::max())));  // above the largest TF32 + half an ulp
  EXPECT_TRUE(std::isnan(round_tf32(NAN)));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(round_tf32(-0.0f)), 0x80000000u);
}

TEST(Precision, Bf16AndFp16RoundToNearestEven) {
  EXPECT_EQ(round_bf16(1.0f + 0x1.8p-8f), 1.0f + 0x1.0p-7f);  // above half: up
  EXPECT_EQ(round_bf16(1.0f + 0x1.0p-8f), 1.0f);               // tie: to the even 1.0
  EXPECT_EQ(round_bf16(1.0f + 0x1.8p-7f), 1.0f + 0x1.0p-6f);   // tie: to the even 1 + 2^-6
  EXPECT_EQ(std::bit_cast<std::uint32_t>(round_bf16(NAN)), 0xFFFF0000u);  // PyTorch's vectorised bf16 NaN
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::max())));
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(70000.0f)));  // beyond fp16's range
  EXPECT_EQ(round_fp16(1.0f + 0x1.0p-12f), 1.0f);
  EXPECT_EQ(round_fp16(0x1.8p-24f), 0x1.0p-23f);  // a subnormal tie (1.5 x 2^-24): to the even 2 x 2^-24
  EXPECT_EQ(std::bit_cast<std::uint32_t>(round_fp16(-NAN)), 0xFFC00000u);  // sign kept, payload dropped
  std::vector<float> v{1.0f + 0x1.0p-11f, 1.0f + 0x1.0p-11f};
  round_to_format(std::span(v).first(1), MatmulFormat::tf32);
  EXPECT_EQ(v[0], 1.0f + 0x1.0p-10f);
  EXPECT_EQ(v[1], 1.0f + 0x1.0p-11f);  // only the span given
  EXPECT_EQ(enum_from<MatmulFormat>("bf16"), MatmulFormat::bf16);
  EXPECT_FALSE(enum_from<MatmulFormat>("fp8"));
  EXPECT_EQ(name_of(MatmulFormat::tf32), "tf32");
}

TEST(HashBits, EqualIffBitsEqual) {
  std::vector<float> a{1.0f, 2.0f, 3.0f}, b = a;
  EXPECT_EQ(hash_bits(a), hash_bits(b));
  b[1] = std::nextafter(b[1], 3.0f);
  EXPECT_NE(hash_bits(a), hash_bits(b));
  std::vector<float> pz{0.0f}, nz{-0.0f};  // equal as numbers, different bits
  EXPECT_NE(hash_bits(pz), hash_bits(nz));
}

TEST(HashBits, EveryPositionAndOrderCounts) {
  // 301 floats: two rounds of the 64 lanes of two-float words, a tail and an odd last float. A one-bit
  // change anywhere, and swapping two neighbours (one word), two floats a word apart (neighbouring
  // lanes) or 128 apart (same lane), each change the hash.
  std::vector<float> a(301);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f + 1.0f;
  const std::uint64_t h = hash_bits(a);
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::vector<float> b = a;
    b[i] = std::nextafter(b[i], 0.0f);
    EXPECT_NE(hash_bits(b), h) << i;
  }
  for (const std::size_t gap : {1u, 2u, 128u}) {
    std::vector<float> b = a;
    std::swap(b[3], b[3 + gap]);
    EXPECT_NE(hash_bits(b), h) << gap;
  }
}

TEST(KeyedStream, FillUniformEqualsSingleDraws) {
  const KeyedStream s(99, Stream::dropout, 4, 1234, 2);
  for (const std::size_t n : {37u, 128u, 203u, 600u}) {  // within, exactly and beyond one batch of 32 blocks
    std::vector<float> bulk(n);
    s.fill_uniform(bulk);
    for (std::size_t j = 0; j < bulk.size(); ++j) EXPECT_EQ(bulk[j], s.uniform(j)) << n << " " << j;
  }
}

// The deterministic reduction's fixed-point conversions must give nearbyint's and the cast's bits.
TEST(FixedPointConversion, RoundToInt64IsNearbyintBelowTwoTo51) {
  std::vector<double> xs{0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 1e-300,
                         0x1p51 - 0.5, -(0x1p51 - 0.5), 0x1p51 - 1.0, 0x1p50 + 0.5, -0x1p50 - 0.5, 0x1p41 - 0.25};
  const KeyedStream rng(7, Stream::synthetic);
  for (std::uint64_t i = 0; i < 20000; ++i)  // every magnitude from 2^-20 to 2^51, both signs
    xs.push_back((i % 2 ? -1.0 : 1.0) * std::ldexp(rng.uniform_double(i), static_cast<int>(i % 72) - 20));
  for (double x : xs)
    ASSERT_EQ(round_to_int64(x), static_cast<std::int64_t>(std::nearbyint(x))) << "x = " << x;
}

TEST(FixedPointConversion, Int64ToDoubleIsTheCastForEveryInt64) {
  std::vector<std::int64_t> vs{0, 1, -1, INT64_MAX, INT64_MIN, INT64_MIN + 1, (1LL << 53) + 1, -(1LL << 53) - 1,
                               (1LL << 53) + 3, (1LL << 62) + 513, -(1LL << 62) - 1025, 0xffffffffLL, -0x100000000LL};
  const KeyedStream rng(8, Stream::synthetic);
  for (std::uint64_t i = 0; i < 20000; ++i) {  // random bits, shifted to every magnitude
    const std::uint64_t bits = (std::uint64_t{rng.u32(2 * i)} << 32) | rng.u32(2 * i + 1);
    vs.push_back(std::bit_cast<std::int64_t>(bits) >> (i % 64));
  }
  for (std::int64_t v : vs)
    ASSERT_EQ(std::bit_cast<std::uint64_t>(int64_to_double(v)), std::bit_cast<std::uint64_t>(static_cast<double>(v)))
        << "v = " << v;
}

namespace {
// The tree written out: sum(lo, count) = sum(lo, count / 2) + sum(lo + count / 2, count / 2), in float.
float tree_reference(const std::vector<std::vector<float>>& leaves, std::size_t lo, std::size_t count, std::size_t i) {
  if (count == 1) return leaves[lo][i];
  const float left = tree_reference(leaves, lo, count / 2, i);
  const float right = tree_reference(leaves, lo + count / 2, count / 2, i);
  return left + right;
}
}  // namespace

TEST(PairwiseSum, IsTheBalancedTreeInLeafOrder) {
  // Magnitudes from 2^-30 to 2^30 with both signs: every grouping other than the tree's rounds
  // differently somewhere. 1000 elements: several blocks of the implementation and a partial one.
  const std::size_t n = 1000;
  for (const std::size_t count : {1u, 2u, 4u, 8u, 16u, 64u}) {
    std::vector<std::vector<float>> leaves(count, std::vector<float>(n));
    for (std::size_t j = 0; j < count; ++j)
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t u = KeyedStream(3, Stream::dropout, static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(i), 0).u32(0);
        leaves[j][i] = std::ldexp(1.0f + static_cast<float>(u & 0xffff) / 65536.0f, static_cast<int>(u >> 16) % 61 - 30) *
                       ((u >> 31) != 0 ? -1.0f : 1.0f);
      }
    std::vector<const float*> ptrs;
    for (const auto& l : leaves) ptrs.push_back(l.data());
    std::vector<float> out(n);
    pairwise_sum(ptrs, n, out.data());
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(tree_reference(leaves, 0, count, i)))
          << count << " leaves, element " << i;
    // In place, into the first and into the last leaf: the same bits.
    for (const std::size_t target : {std::size_t{0}, count - 1}) {
      std::vector<std::vector<float>> copy = leaves;
      std::vector<const float*> cp;
      for (const auto& l : copy) cp.push_back(l.data());
      pairwise_sum(cp, n, copy[target].data());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(copy[target][i], out[i]) << count << " leaves, in place into " << target;
    }
  }
  // Not a left-to-right sum: with 2^24 + 1 + 1 + 1 the tree gives (2^24 + 1) + (1 + 1) = 2^24 + 2, a
  // sequential sum 2^24 (each + 1 is lost to rounding).
  const std::vector<float> big{0x1p24f}, one{1.0f};
  const std::vector<const float*> four{big.data(), one.data(), one.data(), one.data()};
  float r = 0.0f;
  pairwise_sum(four, 1, &r);
  EXPECT_EQ(r, 0x1p24f + 2.0f);
  const std::vector<const float*> three{big.data(), one.data(), one.data()};
  EXPECT_THROW(pairwise_sum(three, 1, &r), std::logic_error);
}
