#pragma once
// How a world size turns the configured batch into per-rank work (seed 001: the global batch, and with
// it the learning dynamics, must not change silently when the number of GPUs does).
//
//   batch.per_rank == 0: the global batch is fixed; micro = global / (W * accum_steps), an error when
//                        it does not divide; with batch.max_micro the accumulation count is the least
//                        >= accum_steps that splits it into micro-batches of at most max_micro;
//   batch.per_rank  > 0: the per-rank micro-batch is fixed; global = W * per_rank * accum_steps grows
//                        with W.
#include <cstdint>

#include "config/run_config.hpp"

namespace divsim {

struct BatchPlan {
  int world_size = 1;
  std::int64_t micro_batch = 0;   // per rank, per micro-step
  int accum_steps = 1;
  std::int64_t global_batch = 0;  // samples per optimizer step over all ranks
  std::int64_t per_rank_step() const { return micro_batch * accum_steps; }
};

BatchPlan plan_batches(const RunConfig& cfg, int world_size);  // throws ConfigError naming the key

}  // namespace divsim
