// optimizer_state_reset: at `start` the chosen ranks lose their optimizer state — momentum buffers, Adam
// moments and step count — as a rank resumed from a checkpoint without optimizer.state_dict() (seed 004
// §3.2, seed 002 table: "gradients synced, optimizer state not"). Its next update differs from the
// others': replicas split at that step, even though the reduced gradient is shared.
#include "faults/fault.hpp"

namespace divsim {
namespace {

class OptimizerStateReset final : public Fault {
 public:
  OptimizerStateReset(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    finish_params();
    default_to_single_step();
    if (ctx.cfg.optim.type == OptimizerType::sgd && ctx.cfg.optim.momentum == 0.0)
      fail("plain SGD without momentum has no optimizer state to lose");
  }
  bool log_every_step() const override { return true; }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.optimizer->reset_state();
    return "optimizer state reset (momentum / moments / step count)";
  }
};

}  // namespace

DIVSIM_REGISTER_FAULT("optimizer_state_reset", OptimizerStateReset);

}  // namespace divsim
