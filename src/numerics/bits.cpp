#include "numerics/bits.hpp"

#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "numerics/simd.hpp"

namespace divsim {

DIVSIM_WIDE_VECTORS std::uint64_t hash_bits(std::span<const float> values, std::uint64_t h) {
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  // Two floats make one 64-bit word (the first in the low half), and word j feeds lane j % kLanes:
  // independent chains the compiler vectorises. A 64-bit vector multiply has a latency of about ten
  // times its issue cost, so 64 lanes (eight vectors of eight) keep the multiplier busy; with 8 lanes
  // (one vector, one chain) the hash cost as much as the SGD step, and a word per float twice this.
  constexpr std::size_t kLanes = 64;
  std::uint64_t lane[kLanes];
  for (std::size_t k = 0; k < kLanes; ++k) lane[k] = h;
  const float* v = values.data();
  auto word = [v](std::size_t j) {
    return std::uint64_t{std::bit_cast<std::uint32_t>(v[2 * j])} | std::uint64_t{std::bit_cast<std::uint32_t>(v[2 * j + 1])} << 32;
  };
  const std::size_t words = values.size() / 2, body = words - words % kLanes;
  for (std::size_t j = 0; j < body; j += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] = (lane[k] ^ word(j + k)) * kPrime;
  for (std::size_t j = body; j < words; ++j) lane[j - body] = (lane[j - body] ^ word(j)) * kPrime;
  if (values.size() % 2 != 0) lane[words - body] = (lane[words - body] ^ std::bit_cast<std::uint32_t>(values.back())) * kPrime;
  for (std::size_t k = 1; k < kLanes; ++k) lane[0] = (lane[0] ^ lane[k]) * kPrime;
  h = lane[0];
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

// Wide vectors: the conversions are a few integer operations per element, so these loops are bound by
// arithmetic while the data is in cache (a product's input block).
DIVSIM_WIDE_VECTORS void round_to_format(std::span<float> values, MatmulFormat f) {
  switch (f) {
    case MatmulFormat::fp32: return;
    case MatmulFormat::tf32: for (float& v : values) v = round_tf32(v); return;
    case MatmulFormat::bf16: for (float& v : values) v = round_bf16(v); return;
    case MatmulFormat::fp16: for (float& v : values) v = round_fp16(v); return;
  }
}

}  // namespace divsim
