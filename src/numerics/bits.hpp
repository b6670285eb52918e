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

// float32 -> narrower format -> float32, the value a GPU or PyTorch computes with after the conversion.
// Each is bit for bit what its source does on every input (validation/rounding.py checks all three
// against PyTorch's conversions and the TF32 rule on every class of bit pattern).

// TF32 (8 exponent, 10 mantissa bits) as PTX's cvt.rna.tf32.f32 converts, the conversion CUDA's TF32
// paths use: round to nearest, ties away from zero; overflow to Inf; NaN and Inf pass through.
inline float round_tf32(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t r = (u + 0x1000u) & 0xFFFFE000u;  // half an ulp of TF32 added to the magnitude
  return (u & 0x7F800000u) == 0x7F800000u ? x : std::bit_cast<float>(r);
}

// bfloat16 as PyTorch converts on the CPU (c10::BFloat16's round_to_nearest_even, ATen's vectorised
// cvtfp32_bf16): round to nearest even; overflow to Inf; subnormals rounded like normals; every NaN
// becomes 0xFFFF (ATen's vector path; its scalar path writes 0x7FC0, and both are NaN).
inline float round_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return std::bit_cast<float>(x != x ? 0xFFFF0000u : r);
}

// IEEE binary16 (5 exponent, 10 mantissa bits) as PyTorch converts on the CPU: round to nearest even;
// from 65520 (65504 + half an ulp) on to Inf; subnormals kept; a NaN keeps its sign and loses its
// payload (0x7E00). In float32 arithmetic, so that it needs neither F16C nor a compiler's _Float16:
// below 2^-14 fp16's grid is the multiples of 2^-24, the ulp of float32 at 0.5, so adding and subtracting
// 0.5 rounds there (to nearest even, the FPU's mode; IEEE arithmetic, which divsim compiles with, may not
// fold the two away); above, the mantissa is rounded at 10 bits.
inline float round_fp16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x), sign = u & 0x80000000u, a = u ^ sign;
  const float m = std::bit_cast<float>(a);
  const std::uint32_t sub = std::bit_cast<std::uint32_t>((m + 0.5f) - 0.5f);
  std::uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u;
  normal = normal > 0x477FE000u ? 0x7F800000u : normal;  // beyond 65504: Inf
  const std::uint32_t r = a >= 0x7F800000u ? (a == 0x7F800000u ? a : 0x7FC00000u) : a < 0x38800000u ? sub : normal;
  return std::bit_cast<float>(sign | r);
}

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
