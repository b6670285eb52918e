// clip_mismatch: gradient clipping applied on the chosen ranks only (the BLOOM-176B incident: clipping
// ran on one rank of a tensor-parallel group and nobody noticed for days). max_norm=X (default 1.0). When
// the reduced gradient's norm exceeds X, the chosen ranks apply a smaller update than the others:
// replicas split at the first such step and /train/grad_norm (the applied gradient) differs per rank.
#include "faults/fault.hpp"

namespace divsim {
namespace {

class ClipMismatch final : public Fault {
 public:
  ClipMismatch(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    max_norm_ = number_param("max_norm", 1.0);
    finish_params();
    if (!(max_norm_ > 0.0)) fail("max_norm must be > 0");
    if (max_norm_ == ctx.cfg.optim.clip_norm) fail("max_norm equals optim.clip_norm: no mismatch");
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.knobs.clip_norm = max_norm_;
    return "gradient clipped to norm " + std::to_string(max_norm_) + " on this rank only";
  }

 private:
  double max_norm_ = 1.0;
};

}  // namespace

DIVSIM_REGISTER_FAULT("clip_mismatch", ClipMismatch);

}  // namespace divsim
