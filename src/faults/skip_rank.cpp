// skip_rank: the chosen ranks are left out of the gradient allreduce (seed 002 §2.3/§3.4: "3 of 4 cards
// averaged, the 4th timed out, was marked unavailable and kept updating alone"). The others average over
// the remaining ranks; the skipped rank updates with its own local gradient (mode=own_grad) or with the
// last reduced gradient it received (mode=stale). Signature: /train/param_hash splits exactly at the
// first skipped step and the skipped rank stays apart; its loss saw-tooths against the others'.
#include "faults/fault.hpp"

namespace divsim {
namespace {

constexpr std::array<std::string_view, 2> kModes{"own_grad", "stale"};

class SkipRank final : public Fault {
 public:
  SkipRank(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    stale_ = choice_param("mode", 0, kModes) == 1;
    finish_params();
    if (spec_.ranks.all) fail("ranks=all would leave nobody in the allreduce; choose some ranks");
    if (spec_.ranks.count() >= ctx.world_size) fail("at least one rank must stay in the allreduce");
  }
  bool log_every_step() const override { return true; }
  bool needs_last_gradient() const override { return stale_; }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.knobs.participates = false;
    r.knobs.stale_gradient = stale_;
    return stale_ ? "left out of the allreduce; applied its last reduced gradient"
                  : "left out of the allreduce; applied its own gradient";
  }

 private:
  bool stale_ = false;
};

}  // namespace

DIVSIM_REGISTER_FAULT("skip_rank", SkipRank);

}  // namespace divsim
