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
