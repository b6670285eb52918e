// loss_scaler_desync: fp16 dynamic loss scaling whose overflow decision is not agreed across ranks
// (seed 000 §4.1: "one machine's GradScaler lowered its scale after an overflow, the other did not, and
// from then on the loss and the update size part ways"). Healthy ranks decide on the reduced gradient,
// so they always agree; the chosen ranks decide on their own local gradient before the reduction, so they
// skip steps the others take (and halve their scale when the others do not). A rank's reduced gradient
// is unscaled by its own scale, so once the scales differ the update sizes differ. Needs precision.amp=fp16.
#include "faults/fault.hpp"

namespace divsim {
namespace {

class LossScalerDesync final : public Fault {
 public:
  LossScalerDesync(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    finish_params();
    if (ctx.cfg.precision.amp != AmpMode::fp16) fail("needs precision.amp=fp16 (dynamic loss scaling)");
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.knobs.local_overflow_check = true;
    return "overflow decided on the local gradient, before the allreduce";
  }
};

}  // namespace

DIVSIM_REGISTER_FAULT("loss_scaler_desync", LossScalerDesync);

}  // namespace divsim
