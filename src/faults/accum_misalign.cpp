// accum_misalign: a rank's gradient-accumulation counter is off (seed 002 §2.2/§4.3: "one rank finished
// its accumulation cycle early, so it did one more AllReduce and one more parameter update than the
// others"; seed 003 §4.3: the LR scheduler stepped per micro-batch instead of per optimizer step).
//   offset=+1  its counter runs one ahead: besides the shared update it applies one more update from its
//              own gradient, whose allreduce found no partner (collectives pair in call order, as in
//              NCCL, so the others never see it);
//   offset=-1  its counter runs one behind: it takes part in the allreduce but its cycle is not complete,
//              so it skips the update the others apply;
//   scheduler_per_micro=true  its scheduler advances accum_steps times per optimizer step.
// Signature: offset: replicas split at the first affected step; scheduler: /train/lr differs per rank.
#include "faults/fault.hpp"

namespace divsim {
namespace {

constexpr std::array<std::string_view, 2> kFalseTrue{"false", "true"};

class AccumMisalign final : public Fault {
 public:
  AccumMisalign(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    per_micro_ = choice_param("scheduler_per_micro", 0, kFalseTrue) == 1;
    offset_ = integer_param("offset", per_micro_ ? 0 : 1);
    finish_params();
    if (per_micro_ && offset_ != 0) fail("choose offset=+1|-1 or scheduler_per_micro=true, not both");
    if (!per_micro_ && offset_ != 1 && offset_ != -1) fail("offset must be +1 or -1");
    if (per_micro_ && ctx.cfg.batch.accum_steps < 2) fail("scheduler_per_micro needs batch.accum_steps >= 2");
  }
  bool log_every_step() const override { return !per_micro_; }
  std::string adjust(std::int64_t step, Replica& r) const override {
    if (per_micro_) {
      r.knobs.schedule_step = step * ctx_.cfg.batch.accum_steps;
      return "LR scheduler stepped per micro-batch";
    }
    r.knobs.extra_updates = static_cast<int>(offset_);
    return offset_ > 0 ? "accumulation counter ahead: one extra local update"
                       : "accumulation counter behind: skipped the update";
  }

 private:
  bool per_micro_ = false;
  std::int64_t offset_ = 1;
};

}  // namespace

DIVSIM_REGISTER_FAULT("accum_misalign", AccumMisalign);

}  // namespace divsim
