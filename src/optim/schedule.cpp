// Learning-rate schedules as closed forms of the step number (see schedule.hpp).
#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace divsim {

double scheduled_lr(const ScheduleSection& cfg, double base_lr, std::int64_t step, std::int64_t total_steps) {
  if (step < cfg.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  }
  const std::int64_t s = step - cfg.warmup_steps;
  switch (cfg.type) {
    case ScheduleType::constant: return base_lr;
    case ScheduleType::step:
      if (cfg.step_size < 1) {
        throw std::invalid_argument("schedule.step_size must be >= 1 for schedule.type = step, got " +
                                    std::to_string(cfg.step_size));
      }
      return base_lr * std::pow(cfg.gamma, static_cast<double>(s / cfg.step_size));
    case ScheduleType::cosine: {
      const auto span = std::max<std::int64_t>(1, total_steps - cfg.warmup_steps);
      const double progress = static_cast<double>(s) / static_cast<double>(span);
      return cfg.min_lr + 0.5 * (base_lr - cfg.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  throw std::logic_error("unknown schedule.type");
}

std::vector<double> schedule_table(const ScheduleSection& cfg, double base_lr, std::int64_t total_steps) {
  std::vector<double> lr(static_cast<std::size_t>(std::max<std::int64_t>(total_steps, 0)));
  for (std::size_t t = 0; t < lr.size(); ++t) lr[t] = scheduled_lr(cfg, base_lr, static_cast<std::int64_t>(t), total_steps);
  return lr;
}

}  // namespace divsim
