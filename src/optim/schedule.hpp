#pragma once
// Learning-rate schedules: a pure function of the optimizer step, so a resumed (or a deliberately
// stale) scheduler is just a different step number. No scheduler object, no state.
#include <cstdint>
#include <vector>

#include "config/run_config.hpp"

namespace divsim {

// Learning rate of optimizer step `step` (0-based) out of `total_steps`:
//  linear warmup for warmup_steps: base * (step + 1) / warmup_steps; then, with s = step - warmup_steps,
//  constant: base; step: base * gamma^floor(s / step_size);
//  cosine: min_lr + 0.5 (base - min_lr) (1 + cos(pi * s / max(1, total - warmup)))
//  (equal to min_lr at step == total_steps, like torch's CosineAnnealingLR at T_max).
// Throws std::invalid_argument naming the schedule.* key on an unknown type or step_size < 1.
double scheduled_lr(const ScheduleSection& cfg, double base_lr, std::int64_t step, std::int64_t total_steps);

// scheduled_lr of steps 0..total_steps-1: the run's /schedule/lr, which the analysis compares /train/lr with.
std::vector<double> schedule_table(const ScheduleSection& cfg, double base_lr, std::int64_t total_steps);

}  // namespace divsim
