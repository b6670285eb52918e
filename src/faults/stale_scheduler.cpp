// stale_scheduler: from `start` the chosen ranks' LR scheduler runs from step 0 again, as after a resume
// that restored model and optimizer but not scheduler.state_dict() (seed 004 §3.3). With warmup or
// cosine the rank's learning rate jumps back: /train/lr differs per rank from `start`, the rank's updates
// are larger or smaller than the others', and replicas split at `start`.
#include "faults/fault.hpp"

namespace divsim {
namespace {

class StaleScheduler final : public Fault {
 public:
  StaleScheduler(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    finish_params();
    if (spec_.start == 0) fail("start must be > 0 (a restart at step 0 changes nothing)");
    if (ctx.cfg.schedule.type == ScheduleType::constant && ctx.cfg.schedule.warmup_steps == 0)
      fail("a constant schedule without warmup has no state to lose");
  }
  std::string adjust(std::int64_t step, Replica& r) const override {
    r.knobs.schedule_step = step - spec_.start;
    return "LR scheduler restarted from step 0 at step " + std::to_string(spec_.start);
  }
};

}  // namespace

DIVSIM_REGISTER_FAULT("stale_scheduler", StaleScheduler);

}  // namespace divsim
