#pragma once
// Bit-level helpers: hashing parameter bits (replicas in sync <=> equal hash) and rounding float32
// to narrower formats (precision emulation of TF32 / BF16 / FP16 matmul inputs).
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

enum class MatmulFormat { fp32, tf32, bf16, fp16 };
MatmulFormat parse_matmul_format(std::string_view name);  // throws std::invalid_argument
const char* to_string(MatmulFormat f);

// Round every element in place to the format (no-op for fp32).
void round_to_format(std::span<float> values, MatmulFormat f);

}  // namespace divsim
