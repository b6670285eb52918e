// bn_drift: BatchNorm without SyncBN and without DDP's buffer broadcast on the chosen ranks (seed 000
// §4.3, seed 003 §3): each keeps its own running mean/var, estimated from its own shard only. Parameters
// stay in sync (gradients are reduced), so /train/param_hash agrees, while the running statistics and
// every rank's eval loss/accuracy (evaluated with its own replica) drift apart: "equal for a while, then
// the eval curves part".
#include "faults/fault.hpp"

namespace divsim {
namespace {

class BnDrift final : public Fault {
 public:
  BnDrift(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    finish_params();
    if (!ctx.model_has_batchnorm)
      fail("needs a model with BatchNorm layers (model.type=" + ctx.cfg.model.type +
           " has none; the mlp has them with model.batchnorm=true, resnet always)");
    if (ctx.cfg.dist.sync_bn) fail("contradicts dist.sync_bn=true (SyncBN shares the statistics)");
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.knobs.receives_buffers = false;
    return "BatchNorm running statistics kept local (no buffer broadcast)";
  }
};

}  // namespace

DIVSIM_REGISTER_FAULT("bn_drift", BnDrift);

}  // namespace divsim
