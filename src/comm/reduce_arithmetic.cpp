#include "comm/reduce_arithmetic.hpp"

namespace divsim {
namespace {

MatmulFormat format_of(ReduceDtype d) {
  switch (d) {
    case ReduceDtype::fp32: return MatmulFormat::fp32;
    case ReduceDtype::bf16: return MatmulFormat::bf16;
    case ReduceDtype::fp16: return MatmulFormat::fp16;
  }
  return MatmulFormat::fp32;
}

void divide_and_round(std::span<float> v, double by, MatmulFormat f) {
  if (by == 1.0) return;  // x / 1 is x, rounded or not
  const auto d = static_cast<float>(by);
  for (float& x : v) x /= d;
  round_to_format(v, f);
}

}  // namespace

int fsdp_predivide_factor(int world_size) {
  int factor = 1;
  while (world_size % factor == 0 && world_size / factor > factor) factor *= 2;
  return factor;
}

double ReduceArithmetic::pre_factor(double divisor, int world_size) const {
  switch (divide) {
    case DivideMode::after: return 1.0;
    case DivideMode::before: return divisor;
    case DivideMode::sqrt: return fsdp_predivide_factor(world_size);
  }
  return 1.0;
}

void ReduceArithmetic::before(std::span<float> contribution, double divisor, int world_size) const {
  round(contribution);
  divide_and_round(contribution, pre_factor(divisor, world_size), format_of(dtype));
}

void ReduceArithmetic::round(std::span<float> partial) const { round_to_format(partial, format_of(dtype)); }

void ReduceArithmetic::after(std::span<float> sum, double divisor, int world_size) const {
  divide_and_round(sum, divisor / pre_factor(divisor, world_size), format_of(dtype));
}

}  // namespace divsim
