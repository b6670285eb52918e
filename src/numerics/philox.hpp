#pragma once
// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), the generator behind cuRAND's and PyTorch's CUDA RNG.
//
// There is no generator state: a draw is a pure function of (key, counter). That is what makes every
// random decision in divsim reproducible, resumable from counters alone, and independent of which rank
// or how many ranks compute it. All randomness goes through KeyedStream below; nothing else may draw.
#include <array>
#include <cstdint>
#include <span>

namespace divsim {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The purpose of a stream is part of its key, so two purposes never share numbers.
enum class Stream : std::uint32_t {
  init = 1,       // parameter initialisation: words = (parameter id)
  sampler = 2,    // epoch permutation: words = (epoch)
  dropout = 3,    // words = (step, global sample index, layer): not the micro-step (see reproducibility.md)
  augment = 4,    // words = (step, global sample index)
  fault = 5,      // fault decisions: words = (fault id, step, rank)
  synthetic = 6,  // synthetic dataset: words = (what, index)
};

// A keyed stream: key = (seed, purpose), counter = (draw index, three purpose words).
// Words identify *what* is being drawn (a parameter, an epoch, a sample), never the rank or the
// world size unless a fault puts them there on purpose.
class KeyedStream {
 public:
  KeyedStream(std::uint64_t seed, Stream purpose, std::uint32_t w1 = 0, std::uint32_t w2 = 0,
              std::uint32_t w3 = 0);

  std::uint32_t u32(std::uint64_t i) const;  // i-th 32-bit word of the stream
  float uniform(std::uint64_t i) const;      // [0, 1) with 24 random bits
  double uniform_double(std::uint64_t i) const;  // [0, 1) with 53 random bits (draws words 2i, 2i+1)
  double normal(std::uint64_t i) const;      // standard normal (Box-Muller on draws 2i, 2i+1)
  std::uint64_t below(std::uint64_t i, std::uint64_t n) const;  // uniform in [0, n) (Lemire, 64-bit)
  // out[j] = uniform(j) for j < out.size(), computing each Philox block once (bulk draws: dropout masks).
  void fill_uniform(std::span<float> out) const;

 private:
  PhiloxKey key_;
  std::uint32_t w1_, w2_, w3_;
};

}  // namespace divsim
