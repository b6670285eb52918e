#include "numerics/philox.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "numerics/simd.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace divsim {

__extension__ typedef unsigned __int128 uint128;  // GCC/Clang builtin, for a 64x64->128 multiply

namespace {

constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  // the round multipliers
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // the key schedule's increments

// The 10 Philox rounds on N counters side by side (c[word][lane]): with N > 1 each step is the same
// operation over N lanes, which the compiler turns into vector code (the portable bulk path below).
// Each 32-bit word is held in a 64-bit lane (T = uint64_t) so that the 32x32->64 products need no
// shuffling of even and odd lanes.
template <class T, std::size_t N>
void philox_rounds(T (&c)[4][N], PhiloxKey k) {
  constexpr T kLow = 0xFFFFFFFFu;
  for (int round = 0; round < 10; ++round) {
    for (std::size_t j = 0; j < N; ++j) {
      const std::uint64_t p0 = std::uint64_t{kPhiloxM0} * c[0][j];
      const std::uint64_t p1 = std::uint64_t{kPhiloxM1} * c[2][j];
      c[0][j] = static_cast<T>((p1 >> 32) ^ c[1][j] ^ k[0]);
      c[1][j] = static_cast<T>(p1 & kLow);
      c[2][j] = static_cast<T>((p0 >> 32) ^ c[3][j] ^ k[1]);
      c[3][j] = static_cast<T>(p0 & kLow);
    }
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
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

// Bulk draws: many Philox blocks side by side, since the ten dependent rounds of one block take far
// longer than issuing them. The rounds multiply the low 32 bits of 64-bit lanes; GCC does not see
// that the high halves of the counters are zero and emits full 64x64 multiplies (three uops each on
// AVX-512, emulated on AVX2), so the x86 versions below say vpmuludq outright. Bits: same as u32(i).
#if defined(__AVX512F__) || defined(__AVX2__)
namespace {

#if defined(__AVX512F__)
constexpr std::size_t kLanes = 8;
typedef std::uint64_t Lanes __attribute__((vector_size(64)));
Lanes mul_lo32(Lanes a, Lanes b) {
  return reinterpret_cast<Lanes>(_mm512_mul_epu32(reinterpret_cast<__m512i>(a), reinterpret_cast<__m512i>(b)));
}
// ab holds words (0, 1) of each lane's block, cd words (2, 3): stores the lanes' 4 words block by block
// as uniforms, 4 * kLanes floats.
void store_uniforms(Lanes ab, Lanes cd, float* out) {
  const __m512i x = reinterpret_cast<__m512i>(ab), y = reinterpret_cast<__m512i>(cd);
  const __m512i first = _mm512_permutex2var_epi64(x, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), y);
  const __m512i second = _mm512_permutex2var_epi64(x, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), y);
  const __m512 scale = _mm512_set1_ps(0x1.0p-24f);
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(first, 8)), scale));
  _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(second, 8)), scale));
}
#else
constexpr std::size_t kLanes = 4;
typedef std::uint64_t Lanes __attribute__((vector_size(32)));
Lanes mul_lo32(Lanes a, Lanes b) {
  return reinterpret_cast<Lanes>(_mm256_mul_epu32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
}
void store_uniforms(Lanes ab, Lanes cd, float* out) {
  const __m256i x = reinterpret_cast<__m256i>(ab), y = reinterpret_cast<__m256i>(cd);
  const __m256i even = _mm256_unpacklo_epi64(x, y), odd = _mm256_unpackhi_epi64(x, y);  // blocks 0, 2 / 1, 3
  const __m256 scale = _mm256_set1_ps(0x1.0p-24f);
  const __m256i first = _mm256_permute2x128_si256(even, odd, 0x20), second = _mm256_permute2x128_si256(even, odd, 0x31);
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(first, 8)), scale));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(second, 8)), scale));
}
#endif

}  // namespace

// 4 vectors of lanes in flight (32 blocks, 128 draws, on AVX-512; the fastest of 2, 4 and 8 measured).
// The counters' high halves are never cleared: mul_lo32 ignores them and the output keeps the low 32 bits.
void KeyedStream::fill_uniform(std::span<float> out) const {
  constexpr std::size_t kVectors = 4, kBlocks = kVectors * kLanes;
  const Lanes m0 = Lanes{} + kPhiloxM0, m1 = Lanes{} + kPhiloxM1, low = Lanes{} + 0xFFFFFFFFu;
  Lanes lane{};
  for (std::size_t j = 0; j < kLanes; ++j) lane[j] = j;
  const std::size_t blocks = (out.size() + 3) / 4;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kBlocks) {
    Lanes c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) {
      c0[v] = lane + (b0 + v * kLanes);
      c1[v] = Lanes{} + w1_;
      c2[v] = Lanes{} + w2_;
      c3[v] = Lanes{} + w3_;
    }
    std::uint32_t k0 = key_[0], k1 = key_[1];
    for (int round = 0; round < 10; ++round) {
      const Lanes key0 = Lanes{} + k0, key1 = Lanes{} + k1;
      for (std::size_t v = 0; v < kVectors; ++v) {
        const Lanes p0 = mul_lo32(c0[v], m0), p1 = mul_lo32(c2[v], m1);
        c0[v] = (p1 >> 32) ^ c1[v] ^ key0;
        c1[v] = p1;
        c2[v] = (p0 >> 32) ^ c3[v] ^ key1;
        c3[v] = p0;
      }
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    // Straight into `out`, but for a last, partial batch of blocks.
    float tail[kBlocks * 4];
    const std::size_t left = out.size() - b0 * 4;
    float* dst = left >= kBlocks * 4 ? out.data() + b0 * 4 : tail;
    for (std::size_t v = 0; v < kVectors; ++v)
      store_uniforms((c0[v] & low) | (c1[v] << 32), (c2[v] & low) | (c3[v] << 32), dst + v * kLanes * 4);
    if (dst == tail) std::copy_n(tail, left, out.data() + b0 * 4);
  }
}
#else
// 32 Philox blocks side by side (128 draws), the rounds written for the auto-vectoriser.
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
#endif

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
