#pragma once
// DIVSIM_WIDE_VECTORS marks a function whose loops are bound by arithmetic rather than memory (Philox
// rounds, norms, hashes): GCC vectorises with 256-bit registers on AVX-512 CPUs unless told otherwise
// (-mprefer-vector-width=256 is its default there, to spare the clock frequency), which halves such
// loops. Eigen's kernels use 512-bit registers anyway. Nothing changes on CPUs without AVX-512 or with
// other compilers; results never depend on the vector width (the loops keep fixed lane patterns).
// noinline: inlined into a caller compiled without the attribute, a function loses it. Mark functions
// that loop over whole arrays or blocks, where one call costs nothing.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define DIVSIM_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define DIVSIM_WIDE_VECTORS
#endif

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace divsim {

// body(i, lane) for i in [0, n), lane = i % Lanes: whole blocks of Lanes, then the tail. A reduction
// kept as one partial result per lane (sums, maxima) vectorises, where a single running float sum does
// not (GCC keeps the order of float adds), and its bits do not depend on the vector width.
template <std::int64_t Lanes, class Body>
inline void for_lanes(std::int64_t n, Body body) {
  std::int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes)
    for (std::int64_t lane = 0; lane < Lanes; ++lane) body(i + lane, lane);
  for (std::int64_t lane = 0; i + lane < n; ++lane) body(i + lane, lane);
}

// to[0, n) = from[0, n) for short rows (a few to a few dozen floats: image rows, attention heads), inline,
// where a memmove call per row costs more than the copying. Whole vectors of 16, 8 and 4, then single
// floats: masked stores, the other way to end a row, are slow on AMD's Zen 4.
inline void copy_short(const float* __restrict from, std::int64_t n, float* __restrict to) {
#if defined(__AVX512F__)
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(to + i, _mm512_loadu_ps(from + i));
  if (i + 8 <= n) {
    _mm256_storeu_ps(to + i, _mm256_loadu_ps(from + i));
    i += 8;
  }
  if (i + 4 <= n) {
    _mm_storeu_ps(to + i, _mm_loadu_ps(from + i));
    i += 4;
  }
  for (; i < n; ++i) to[i] = from[i];
#else
  std::copy_n(from, n, to);
#endif
}

}  // namespace divsim
