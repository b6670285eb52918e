// Sampler tests: distributed mode against a literal re-implementation of PyTorch's DistributedSampler
// (+ DataLoader drop_last batching), the epoch permutation's properties, and the world-size invariance
// of global_batch mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "data/sampler.hpp"
#include "numerics/philox.hpp"

using namespace divsim;

namespace {

// torch/utils/data/distributed.py, __iter__, transcribed (num_samples with float ceil as torch does).
std::vector<std::int64_t> torch_shard(std::vector<std::int64_t> indices, int w, int rank, bool drop_last) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const auto num_samples = drop_last && n % w != 0
                               ? static_cast<std::int64_t>(std::ceil(static_cast<double>(n - w) / w))
                               : static_cast<std::int64_t>(std::ceil(static_cast<double>(n) / w));
  const std::int64_t total = num_samples * w;
  if (!drop_last) {
    const std::int64_t padding = total - n;
    if (padding <= n) {
      // A copy first: inserting a vector's own range into it is undefined (the insert may reallocate).
      const std::vector<std::int64_t> head(indices.begin(), indices.begin() + padding);
      indices.insert(indices.end(), head.begin(), head.end());
    } else {
      std::vector<std::int64_t> rep;
      const auto times =
          static_cast<std::int64_t>(std::ceil(static_cast<double>(padding) / static_cast<double>(n)));
      for (std::int64_t t = 0; t < times; ++t) rep.insert(rep.end(), indices.begin(), indices.begin() + n);
      indices.insert(indices.end(), rep.begin(), rep.begin() + padding);
    }
  } else {
    indices.resize(static_cast<std::size_t>(total));
  }
  std::vector<std::int64_t> shard;
  for (std::int64_t p = rank; p < total; p += w) shard.push_back(indices[static_cast<std::size_t>(p)]);
  EXPECT_EQ(static_cast<std::int64_t>(shard.size()), num_samples);
  return shard;
}

// DataLoader(batch_size=mb, drop_last=True) over the shard, grouped into optimizer steps of `accum`.
std::vector<std::vector<std::int64_t>> loader_batches(const std::vector<std::int64_t>& shard,
                                                      std::int64_t mb) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t at = 0; at + static_cast<std::size_t>(mb) <= shard.size();
       at += static_cast<std::size_t>(mb)) {
    out.emplace_back(shard.begin() + static_cast<std::ptrdiff_t>(at),
                     shard.begin() + static_cast<std::ptrdiff_t>(at) + mb);
  }
  return out;
}

std::vector<std::int64_t> arange(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// The epoch permutation, read back through a one-rank, one-sample-per-step sampler.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  Sampler s(SamplerMode::distributed, {n, 1, 1, 1, true, true, seed});
  s.set_epoch(epoch);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    s.micro_batch(0, i, 0, std::span(perm).subspan(static_cast<std::size_t>(i), 1));
  return perm;
}

// All micro-batches of step s, ranks in order, micro-steps in order.
std::vector<std::int64_t> global_batch_of(const Sampler& s, int w, int accum, std::int64_t mb,
                                          std::int64_t step) {
  std::vector<std::int64_t> all, buf(static_cast<std::size_t>(mb));
  for (int r = 0; r < w; ++r) {
    for (int m = 0; m < accum; ++m) {
      s.micro_batch(r, step, m, buf);
      all.insert(all.end(), buf.begin(), buf.end());
    }
  }
  return all;
}

// Compares every micro-batch of a distributed sampler with the reference on `indices`.
void expect_matches_torch(const Sampler& s, const std::vector<std::int64_t>& indices, int w, std::int64_t mb,
                          int accum, bool drop_last) {
  std::vector<std::int64_t> buf(static_cast<std::size_t>(mb));
  for (int r = 0; r < w; ++r) {
    const auto batches = loader_batches(torch_shard(indices, w, r, drop_last), mb);
    ASSERT_EQ(s.steps_per_epoch(), static_cast<std::int64_t>(batches.size()) / accum);
    for (std::int64_t step = 0; step < s.steps_per_epoch(); ++step) {
      for (int m = 0; m < accum; ++m) {
        s.micro_batch(r, step, m, buf);
        ASSERT_EQ(buf, batches[static_cast<std::size_t>(step * accum + m)])
            << "N=" << indices.size() << " W=" << w << " rank=" << r << " mb=" << mb << " accum=" << accum
            << " drop_last=" << drop_last << " step=" << step << " micro=" << m;
      }
    }
  }
}

}  // namespace

TEST(Sampler, DistributedMatchesTorchUnshuffled) {
  int compared = 0, rejected = 0;
  for (std::int64_t n = 1; n <= 23; ++n) {
    for (int w : {1, 2, 3, 4, 5, 7}) {
      for (bool drop_last : {false, true}) {
        for (std::int64_t mb : {1, 2, 3}) {
          for (int accum : {1, 2}) {
            const SamplerShape shape{n, w, mb, accum, drop_last, false, 0};
            std::vector<std::int64_t> shard0 = torch_shard(arange(n), w, 0, drop_last);
            const auto steps = static_cast<std::int64_t>(loader_batches(shard0, mb).size()) / accum;
            if (steps == 0) {
              EXPECT_THROW(Sampler(SamplerMode::distributed, shape), std::invalid_argument);
              ++rejected;
              continue;
            }
            const Sampler s(SamplerMode::distributed, shape);
            expect_matches_torch(s, arange(n), w, mb, accum, drop_last);
            ++compared;
          }
        }
      }
    }
  }
  // Both padding branches (repeat once / repeat several times) and the rejection path were exercised.
  EXPECT_GT(compared, 800);
  EXPECT_GT(rejected, 100);
}

TEST(Sampler, DistributedMatchesTorchShuffled) {
  // The permutation does not depend on W, so the one read back with W = 1 is the torch input for all W.
  for (std::int64_t n : {37, 64, 101}) {
    const auto perm = permutation(n, 42, 3);
    for (int w : {2, 3, 4, 6}) {
      for (bool drop_last : {false, true}) {
        Sampler s(SamplerMode::distributed, {n, w, 2, 2, drop_last, true, 42});
        s.set_epoch(3);
        expect_matches_torch(s, perm, w, 2, 2, drop_last);
      }
    }
  }
}

TEST(Sampler, EpochPermutations) {
  const std::int64_t n = 200;
  const auto p0 = permutation(n, 7, 0), p1 = permutation(n, 7, 1);
  for (const auto& p : {p0, p1}) {
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, arange(n));
  }
  EXPECT_NE(p0, p1);
  // The documented recipe: Fisher-Yates from the top on KeyedStream(seed, sampler, epoch), j = below(i, i+1).
  auto recipe = arange(n);
  const KeyedStream ks(7, Stream::sampler, 1);
  for (std::size_t i = static_cast<std::size_t>(n) - 1; i > 0; --i)
    std::swap(recipe[i], recipe[ks.below(i, i + 1)]);
  EXPECT_EQ(p1, recipe);
  EXPECT_NE(p0, arange(n));
  EXPECT_EQ(p0, permutation(n, 7, 0));
  EXPECT_NE(p0, permutation(n, 8, 0));
  // Unshuffled: identity whatever the epoch.
  Sampler s(SamplerMode::distributed, {n, 1, 1, 1, true, false, 7});
  s.set_epoch(5);
  EXPECT_EQ(s.epoch(), 5);
  std::vector<std::int64_t> one(1);
  s.micro_batch(0, 17, 0, one);
  EXPECT_EQ(one[0], 17);
}

TEST(Sampler, ShuffleIsUniform) {
  // All 24 orders of 4 items over 12000 epochs: each expected 500 times (sd ~ 22).
  Sampler s(SamplerMode::distributed, {4, 1, 4, 1, true, true, 99});
  std::map<std::vector<std::int64_t>, int> counts;
  std::vector<std::int64_t> buf(4);
  for (std::int64_t e = 0; e < 12000; ++e) {
    s.set_epoch(e);
    s.micro_batch(0, 0, 0, buf);
    ++counts[buf];
  }
  ASSERT_EQ(counts.size(), 24u);
  for (const auto& [order, c] : counts) {
    EXPECT_GT(c, 380);
    EXPECT_LT(c, 620);
  }
}

TEST(Sampler, EverySampleOncePerEpoch) {
  // N divisible by the global batch: both modes visit each sample exactly once.
  for (SamplerMode mode : {SamplerMode::distributed, SamplerMode::global_batch}) {
    const Sampler s(mode, {96, 4, 4, 2, true, true, 3});
    ASSERT_EQ(s.steps_per_epoch(), 3);
    std::vector<std::int64_t> seen;
    for (std::int64_t step = 0; step < 3; ++step) {
      const auto b = global_batch_of(s, 4, 2, 4, step);
      seen.insert(seen.end(), b.begin(), b.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, arange(96));
  }
}

TEST(Sampler, GlobalBatchIsWorldSizeInvariant) {
  // G = 16 fixed, split as W x accum x micro_batch in four ways: the same samples in the same order.
  struct Split {
    int w, accum;
    std::int64_t mb;
  };
  const std::int64_t n = 100;
  const auto perm = permutation(n, 11, 2);
  for (const Split& sp : {Split{1, 4, 4}, Split{2, 2, 4}, Split{4, 1, 4}, Split{4, 2, 2}, Split{2, 1, 8}}) {
    Sampler s(SamplerMode::global_batch, {n, sp.w, sp.mb, sp.accum, true, true, 11});
    s.set_epoch(2);
    ASSERT_EQ(s.steps_per_epoch(), 6);
    for (std::int64_t step = 0; step < 6; ++step) {
      const std::vector<std::int64_t> expected(perm.begin() + step * 16, perm.begin() + (step + 1) * 16);
      EXPECT_EQ(global_batch_of(s, sp.w, sp.accum, sp.mb, step), expected)
          << "W=" << sp.w << " step=" << step;
    }
  }
}

TEST(Sampler, BothModesSeeTheSameGlobalBatchSet) {
  const std::int64_t n = 103;
  const int w = 4, accum = 2;
  const std::int64_t mb = 3;
  Sampler dist(SamplerMode::distributed, {n, w, mb, accum, true, true, 5});
  Sampler glob(SamplerMode::global_batch, {n, w, mb, accum, true, true, 5});
  dist.set_epoch(1);
  glob.set_epoch(1);
  ASSERT_EQ(dist.steps_per_epoch(), 4);
  ASSERT_EQ(glob.steps_per_epoch(), 4);
  for (std::int64_t step = 0; step < 4; ++step) {
    auto a = global_batch_of(dist, w, accum, mb, step), b = global_batch_of(glob, w, accum, mb, step);
    EXPECT_NE(a, b);  // split differently...
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);  // ...but the same samples
  }
}

TEST(Sampler, RejectsBadShapesAndArguments) {
  EXPECT_THROW(Sampler(SamplerMode::distributed, {10, 4, 3, 1, true, true, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplerMode::global_batch, {10, 4, 3, 1, true, true, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplerMode::distributed, {0, 1, 1, 1, true, true, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplerMode::distributed, {10, 0, 1, 1, true, true, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler(SamplerMode::distributed, {10, 1, 1, 0, true, true, 0}), std::invalid_argument);
  Sampler s(SamplerMode::distributed, {16, 2, 2, 2, true, true, 0});
  ASSERT_EQ(s.steps_per_epoch(), 2);
  std::vector<std::int64_t> buf(2), wrong(3);
  EXPECT_NO_THROW(s.micro_batch(1, 1, 1, buf));
  EXPECT_THROW(s.micro_batch(2, 0, 0, buf), std::out_of_range);
  EXPECT_THROW(s.micro_batch(0, 2, 0, buf), std::out_of_range);
  EXPECT_THROW(s.micro_batch(0, 0, 2, buf), std::out_of_range);
  EXPECT_THROW(s.micro_batch(0, 0, 0, wrong), std::out_of_range);
  EXPECT_THROW(s.set_epoch(-1), std::invalid_argument);
  try {
    Sampler(SamplerMode::distributed, {10, 4, 3, 1, true, true, 0});
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("10 samples"), std::string::npos) << e.what();
  }
}
