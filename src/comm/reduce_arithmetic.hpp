#pragma once
// A reduction's arithmetic besides its order (dist.reduce_dtype, dist.divide).
//
// dtype: each rank's contribution is rounded to it before it is sent, and every partial sum is rounded to
// it after each add, as NCCL sums bf16/fp16 buffers (each add in float, the result stored in the dtype)
// and as DDP's bf16/fp16 compression hooks and FSDP's MixedPrecision(reduce_dtype=...) send gradients.
// divide: where the division by the divisor (the world size, or the participating ranks) happens:
//   after   the sum, then / divisor (divsim's default);
//   before  each contribution / divisor, then the sum (DDP: the bucket's div_(world_size) before the
//           allreduce, also in its compression hooks);
//   sqrt    / f before and / (divisor / f) after, f = FSDP's gradient pre-divide factor, about sqrt(W):
//           doubled from 1 while it divides W and is below W / f (torch.distributed.fsdp's
//           _get_gradient_predivide_factor; W = 8 gives 4 and 2, W = 6 gives 4 and 1.5).
// A division in the dtype rounds to it: round(round(g) / pre), round(sum / post).
#include <span>

#include "config/run_config.hpp"
#include "numerics/bits.hpp"

namespace divsim {

struct ReduceArithmetic {
  ReduceDtype dtype = ReduceDtype::fp32;
  DivideMode divide = DivideMode::after;

  // In float32 divided after the sum (the defaults) before() and round() do nothing and after() is a
  // float32 division: the reducers call them on every path.
  // What each contribution is divided by before the sum, for this divisor in a world of W ranks.
  double pre_factor(double divisor, int world_size) const;
  // A contribution, in place: rounded to the dtype, then divided by pre_factor (in the dtype).
  void before(std::span<float> contribution, double divisor, int world_size) const;
  // A partial sum after an add, in place: rounded to the dtype.
  void round(std::span<float> partial) const;
  // The sum, in place: divided by divisor / pre_factor, rounded to the dtype.
  void after(std::span<float> sum, double divisor, int world_size) const;
};

// FSDP's pre-divide factor for a world of W ranks.
int fsdp_predivide_factor(int world_size);

}  // namespace divsim
