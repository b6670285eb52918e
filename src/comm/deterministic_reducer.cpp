// dist.reduce=deterministic: a sum whose bits do not depend on the world size, the rank order, the
// process layout or the bucket layout.
//
// Design: every partial (one chunk of samples' gradient, computed with identical shapes whatever the
// world size) is converted to a 64-bit fixed-point integer with a scale shared by all ranks, and the
// integers are summed exactly, which makes the sum associative: MPI_Allreduce may add them in any
// order. The scale of each tensor (each statistic) comes from the global maximum magnitude, agreed with
// MPI_Allreduce(MAX), which is exact and order-free too. Headroom for 2^21 partials leaves 41 bits of
// resolution below the largest partial: far finer than float32's 24, so the result is the exact sum
// rounded to double, scaled by 2^-S / divisor in double, then rounded to float: within an ulp of float32
// of the exact mean. A non-finite partial makes its tensor non-finite (NaN/Inf propagate).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/reducer.hpp"
#include "comm/statistics.hpp"
#include "numerics/bits.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

constexpr int kHeadroomBits = 21;  // up to 2^21 partials per element without overflow
constexpr int kMantissaBits = 62 - kHeadroomBits;

void check_headroom(long long partials) {
  if (partials > (1LL << kHeadroomBits))
    throw std::logic_error("deterministic reduction: more than 2^21 partials per element");
}

// Scale exponent for a segment whose largest magnitude is max_abs: |v| * 2^S < 2^kMantissaBits.
// Largest |v| of n floats, NaN counting as infinity so it propagates. On the bit patterns with the sign
// cleared, integer order is magnitude order (and a vectorised integer max is ~50x faster than fmax).
DIVSIM_WIDE_VECTORS double max_magnitude(const float* v, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<std::uint32_t>(v[i]) & 0x7fffffffu);
  return static_cast<double>(std::bit_cast<float>(std::min(m, 0x7f800000u)));
}

int scale_exponent(double max_abs) {
  if (max_abs == 0.0) return 0;
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs < 2^e
  return kMantissaBits - e;
}

constexpr std::size_t kBlock = 512;  // elements converted at a time: the block's sum stays in L1

// acc[i] = sum over the partials of round(v[lo + i] * scale) as 64-bit integers (exact: the sum's order
// does not matter). Multiplying by a power of two is exact, and |v * scale| < 2^kMantissaBits < 2^51.
DIVSIM_WIDE_VECTORS void to_fixed(const std::vector<const float*>& partials, std::size_t lo, std::size_t n,
                                  double scale, std::int64_t* acc) {
  static_assert(kMantissaBits < 51, "round_to_int64 needs |x| < 2^51");
  std::fill_n(acc, n, 0);
  for (const float* v : partials)
    for (std::size_t i = 0; i < n; ++i) acc[i] += round_to_int64(static_cast<double>(v[lo + i]) * scale);
}

// out[i] = float(acc[i] * factor), factor = 2^-S / divisor. One product instead of a division per
// element: the same function of the same integers at every world size, which is all the invariance needs.
DIVSIM_WIDE_VECTORS void from_fixed(const std::int64_t* acc, std::size_t n, double factor, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(int64_to_double(acc[i]) * factor);
}

class DeterministicReducer final : public Reducer {
 public:
  Normalisation normalisation(double rank_scale, double targets, int) const override {
    return exact_sum_normalisation(rank_scale, targets);
  }
  DeterministicReducer(MPI_Comm comm, const ReduceLayout& layout)
      : comm_(comm), layout_(layout), fixed_(layout.num_params), max_(layout.tensors.size()) {
    MPI_Comm_size(comm, &processes_);
  }

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    check_parts(parts);
    const std::size_t n = layout_.num_params;
    // Every partial of this process, in a fixed order: local rank, then part.
    partials_.clear();
    for (const auto& g : grads)
      for (int p = 0; p < parts; ++p) partials_.push_back(g.data() + static_cast<std::size_t>(p) * n);
    for (std::size_t t = 0; t < layout_.tensors.size(); ++t) {
      const auto [off, size] = layout_.tensors[t];
      double m = 0.0;
      for (const float* v : partials_) m = std::fmax(m, max_magnitude(v + off, size));
      max_[t] = m;
    }
    allreduce_in_place(max_.data(), static_cast<int>(max_.size()), MPI_DOUBLE, MPI_MAX, comm_);
    for (std::size_t t = 0; t < layout_.tensors.size(); ++t) {
      const auto [off, size] = layout_.tensors[t];
      if (!std::isfinite(max_[t])) {  // the tensor comes out NaN; its integers only need to be defined
        std::fill_n(fixed_.data() + off, size, 0);
        continue;
      }
      // Block by block, all partials of a block summed while it is in cache: each partial is read once
      // and the integer sum written once.
      const double scale = std::ldexp(1.0, scale_exponent(max_[t]));
      for (std::size_t lo = off; lo < off + size; lo += kBlock)
        to_fixed(partials_, lo, std::min(kBlock, off + size - lo), scale, fixed_.data() + lo);
    }
    allreduce_in_place(fixed_.data(), static_cast<int>(n), MPI_INT64_T, MPI_SUM, comm_);
    float* out = grads[0].data();
    for (std::size_t t = 0; t < layout_.tensors.size(); ++t) {
      const auto [off, size] = layout_.tensors[t];
      if (std::isfinite(max_[t]))
        from_fixed(fixed_.data() + off, size, std::ldexp(1.0, -scale_exponent(max_[t])) / divisor, out + off);
      else
        std::fill_n(out + off, size, std::numeric_limits<float>::quiet_NaN());
    }
    for (std::size_t k = 1; k < grads.size(); ++k) std::copy_n(out, n, grads[k].data());
  }

  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_fixed_point(values, layout_.rank_count * parts, out, comm_, stat_scratch_);
  }

 private:
  void check_parts(int parts) const {
    check_headroom(static_cast<long long>(parts) * layout_.rank_count * processes_);
  }

  MPI_Comm comm_;
  ReduceLayout layout_;
  int processes_ = 1;
  std::vector<std::int64_t> fixed_;
  std::vector<double> max_;
  std::vector<const float*> partials_;
  FixedPointScratch stat_scratch_;
};

}  // namespace

void sum_statistics_fixed_point(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm,
                                FixedPointScratch& scratch) {
  const std::size_t n = out.size();
  if (values.size() != static_cast<std::size_t>(rows) * n) throw std::logic_error("sum_statistics: bad layout");
  int processes = 1;
  MPI_Comm_size(comm, &processes);
  check_headroom(static_cast<long long>(rows) * processes);
  // NaN must win the max so that it propagates (fmax would drop it).
  auto magnitude = [](double v) { return std::isnan(v) ? std::numeric_limits<double>::infinity() : std::fabs(v); };
  scratch.max.assign(n, 0.0);  // statistics are small vectors: one scale per element
  scratch.fixed.assign(n, 0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    for (std::size_t i = 0; i < n; ++i) scratch.max[i] = std::fmax(scratch.max[i], magnitude(values[r * n + i]));
  allreduce_in_place(scratch.max.data(), static_cast<int>(n), MPI_DOUBLE, MPI_MAX, comm);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (std::isfinite(scratch.max[i]))
        scratch.fixed[i] += static_cast<std::int64_t>(std::nearbyint(std::ldexp(values[r * n + i], scale_exponent(scratch.max[i]))));
  allreduce_in_place(scratch.fixed.data(), static_cast<int>(n), MPI_INT64_T, MPI_SUM, comm);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = std::isfinite(scratch.max[i]) ? std::ldexp(static_cast<double>(scratch.fixed[i]), -scale_exponent(scratch.max[i]))
                                           : std::numeric_limits<double>::quiet_NaN();
}

std::unique_ptr<Reducer> make_deterministic_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<DeterministicReducer>(comm, layout);
}

}  // namespace divsim
