#include "numerics/philox.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "numerics/simd.hpp"

namespace divsim {

__extension__ typedef unsigned __int128 uint128;  // GCC/Clang builtin, for a 64x64->128 multiply

namespace {

// The 10 Philox rounds on N counters side by side (c[word][lane]): with N > 1 each step is the same
// operation over N lanes, which the compiler turns into vector code. Each 32-bit word is held in a
// 64-bit lane (T = uint64_t) so that the 32x32->64 products are single unsigned multiplies of the low
// halves (vpmuludq), with no shuffling of even and odd lanes.
template <class T, std::size_t N>
void philox_rounds(T (&c)[4][N], PhiloxKey k) {
  constexpr T kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kLow = 0xFFFFFFFFu;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    for (std::size_t j = 0; j < N; ++j) {
      const std::uint64_t p0 = std::uint64_t{kM0} * c[0][j];
      const std::uint64_t p1 = std::uint64_t{kM1} * c[2][j];
      c[0][j] = static_cast<T>((p1 >> 32) ^ c[1][j] ^ k[0]);
      c[1][j] = static_cast<T>(p1 & kLow);
      c[2][j] = static_cast<T>((p0 >> 32) ^ c[3][j] ^ k[1]);
      c[3][j] = static_cast<T>(p0 & kLow);
    }
    k[0] += kW0;
    k[1] += kW1;
  }
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  std::uint32_t c[4][1] = {{counter[0]}, {counter[1]}, {counter[2]}, {counter[3]}};
  philox_rounds(c, key);
  return {c[0][0], c[1][0], c[2][0], c[3][0]};
}

KeyedStream::KeyedStream(std::uint64_t seed, Stream purpose, std::uint32_t w1, std::uint32_t w2,
                         std::uint32_t w3)
    : key_{static_cast<std::uint32_t>(seed),
           static_cast<std::uint32_t>(seed >> 32) ^ (static_cast<std::uint32_t>(purpose) * 0x85EBCA6Bu)},
      w1_(w1),
      w2_(w2),
      w3_(w3) {}

std::uint32_t KeyedStream::u32(std::uint64_t i) const {
  // The draw index's high bits are folded into the first purpose word: streams are far shorter than
  // 2^32 blocks in practice, and this keeps all three words free for the caller.
  const auto block = static_cast<std::uint32_t>(i >> 2);
  const auto high = static_cast<std::uint32_t>(i >> 34);
  const PhiloxCounter out = philox4x32_10({block, w1_ ^ (high * 0x27D4EB2Fu), w2_, w3_}, key_);
  return out[i & 3u];
}

float KeyedStream::uniform(std::uint64_t i) const {
  return static_cast<float>(u32(i) >> 8) * 0x1.0p-24f;
}

// 32 Philox blocks side by side (128 draws): the ten dependent rounds of one vector of counters take far
// longer than issuing them, so several vectors must be in flight.
DIVSIM_WIDE_VECTORS void KeyedStream::fill_uniform(std::span<float> out) const {
  constexpr std::size_t kBlocks = 32;
  const std::size_t blocks = (out.size() + 3) / 4;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kBlocks) {
    std::uint64_t c[4][kBlocks];
    for (std::size_t j = 0; j < kBlocks; ++j) {
      c[0][j] = static_cast<std::uint32_t>(b0 + j);
      c[1][j] = w1_;
      c[2][j] = w2_;
      c[3][j] = w3_;
    }
    philox_rounds(c, key_);
    float u[kBlocks * 4];
    for (std::size_t j = 0; j < kBlocks; ++j)
      for (std::size_t w = 0; w < 4; ++w)
        u[4 * j + w] = static_cast<float>(static_cast<std::uint32_t>(c[w][j]) >> 8) * 0x1.0p-24f;
    std::copy_n(u, std::min(kBlocks * 4, out.size() - b0 * 4), out.data() + b0 * 4);
  }
}

double KeyedStream::uniform_double(std::uint64_t i) const {
  const std::uint64_t hi = u32(2 * i) >> 5, lo = u32(2 * i + 1) >> 6;  // 27 + 26 = 53 bits
  return static_cast<double>((hi << 26) | lo) * 0x1.0p-53;
}

double KeyedStream::normal(std::uint64_t i) const {
  const double u1 = 1.0 - uniform_double(2 * i);  // (0, 1]: log is finite
  const double u2 = uniform_double(2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t KeyedStream::below(std::uint64_t i, std::uint64_t n) const {
  const std::uint64_t x = (std::uint64_t{u32(2 * i)} << 32) | u32(2 * i + 1);
  return static_cast<std::uint64_t>((static_cast<uint128>(x) * n) >> 64);
}

}  // namespace divsim
