#include "train/batch_plan.hpp"

#include <string>

#include "config/config_error.hpp"

namespace divsim {

BatchPlan plan_batches(const RunConfig& cfg, int world_size) {
  BatchPlan plan;
  plan.world_size = world_size;
  plan.accum_steps = static_cast<int>(cfg.batch.accum_steps);
  if (cfg.batch.per_rank > 0) {
    plan.micro_batch = cfg.batch.per_rank;
    plan.global_batch = plan.micro_batch * world_size * plan.accum_steps;
    return plan;
  }
  if (cfg.batch.max_micro > 0) {
    // The memory-bound recipe of seed 001: keep the global batch, accumulate more on fewer ranks.
    for (std::int64_t a = plan.accum_steps; a * world_size <= cfg.batch.global; ++a)
      if (cfg.batch.global % (a * world_size) == 0 && cfg.batch.global / (a * world_size) <= cfg.batch.max_micro) {
        plan.accum_steps = static_cast<int>(a);
        plan.micro_batch = cfg.batch.global / (a * world_size);
        plan.global_batch = cfg.batch.global;
        return plan;
      }
    throw ConfigError("batch.max_micro", "no accumulation count splits batch.global " + std::to_string(cfg.batch.global) +
                                             " over world size " + std::to_string(world_size) +
                                             " into micro-batches of at most " + std::to_string(cfg.batch.max_micro));
  }
  const std::int64_t ways = static_cast<std::int64_t>(world_size) * plan.accum_steps;
  if (cfg.batch.global % ways != 0)
    throw ConfigError("batch.global", std::to_string(cfg.batch.global) + " cannot be split over world size " +
                                          std::to_string(world_size) + " x batch.accum_steps " +
                                          std::to_string(plan.accum_steps) + " (needs a multiple of " +
                                          std::to_string(ways) + "; or set batch.per_rank)");
  plan.micro_batch = cfg.batch.global / ways;
  plan.global_batch = cfg.batch.global;
  return plan;
}

}  // namespace divsim
