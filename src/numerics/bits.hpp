#pragma once
// Bit-level helpers: hashing parameter bits (replicas in sync <=> equal hash) and rounding float32
// to narrower formats (precision emulation of TF32 / BF16 / FP16 matmul inputs), and the exact
// double <-> int64 conversions of the deterministic reduction.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace divsim {

// 64-bit FNV-1a over the exact bits of the floats in 64 interleaved lanes (float i feeds lane i % 64,
// 32 bits at a time), the lanes folded in order, then a final avalanche (splitmix64 finaliser).
// Two replicas have equal hashes iff (up to 2^-64) every parameter bit is equal.
std::uint64_t hash_bits(std::span<const float> values, std::uint64_t h = 0xcbf29ce484222325ull);

// Round-to-nearest-even of a float32 to `mantissa_bits` explicit mantissa bits, keeping float32's
// exponent range (TF32: 10, BF16: 7). NaN and Inf pass through.
float round_mantissa(float x, int mantissa_bits);

// IEEE binary16 round trip (FP16: 10 mantissa bits, 5 exponent bits: overflow -> Inf, subnormals).
float round_fp16(float x);

// Its configuration names (precision.matmul, tf32_mismatch's format) are in config/run_config.hpp.
enum class MatmulFormat { fp32, tf32, bf16, fp16 };

// Round every element in place to the format (no-op for fp32).
void round_to_format(std::span<float> values, MatmulFormat f);

// double <-> int64 by adding a constant that fixes the exponent, so that the integer is the low bits of
// the double: integer and double adds only, which vectorise on any x86-64 (a vector conversion needs
// AVX-512DQ; without it GCC converts one element at a time, which made the deterministic reduction's
// fixed-point conversion most of its cost on AVX2 CPUs). Bit for bit what nearbyint and a cast give.

// nearbyint(x) as int64 (to nearest even in the default rounding mode), for |x| < 2^51: x + 1.5*2^52
// lies in [2^52, 2^53), where the ulp is 1, and rounds once as nearbyint does.
inline std::int64_t round_to_int64(double x) {
  constexpr double magic = 0x1.8p52;
  return std::bit_cast<std::int64_t>(x + magic) - std::bit_cast<std::int64_t>(magic);
}

// static_cast<double>(v), correctly rounded, for every int64: its high and low 32 bits (offset by 2^63
// so that both are non-negative) become exact doubles; the subtraction is exact and the sum rounds once.
inline double int64_to_double(std::int64_t v) {
  const std::uint64_t u = std::bit_cast<std::uint64_t>(v) ^ (1ULL << 63);
  const double hi = std::bit_cast<double>((u >> 32) | 0x4530000000000000ULL);            // 2^84 + hi * 2^32
  const double lo = std::bit_cast<double>((u & 0xffffffffULL) | 0x4330000000000000ULL);  // 2^52 + lo
  return (hi - (0x1p84 + 0x1p63 + 0x1p52)) + lo;
}

}  // namespace divsim
