// loss_skew: the chosen ranks compute the loss with another hyper-parameter (seed 002 §3.5: two cards
// ran an ASL implementation with margin 0.05, the others 0.1, after a partial code update). The
// allreduce averages gradients of different objectives: replicas stay in sync, but the chosen ranks'
// local loss and grad norm differ systematically and the run drifts slowly from the baseline.
//   param=label_smoothing,value=X   (cross_entropy)     param=asl_margin,value=X   (loss.type=asl)
#include "faults/fault.hpp"

namespace divsim {
namespace {

class LossSkew final : public Fault {
 public:
  LossSkew(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    param_ = text_param("param", "label_smoothing", {"label_smoothing", "asl_margin"});
    value_ = number_param("value", 0.1);
    finish_params();
    if (value_ < 0.0 || value_ >= 1.0) fail("value must be in [0, 1)");
    if (param_ == "asl_margin" && ctx.cfg.loss.type != LossType::asl) fail("param=asl_margin needs loss.type=asl");
    if (param_ == "label_smoothing" && ctx.cfg.loss.type != LossType::cross_entropy)
      fail("param=label_smoothing needs loss.type=cross_entropy");
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    (param_ == "asl_margin" ? r.knobs.loss.margin : r.knobs.loss.label_smoothing) = value_;
    return param_ + " = " + std::to_string(value_);
  }

 private:
  std::string param_;
  double value_ = 0.0;
};

}  // namespace

DIVSIM_REGISTER_FAULT("loss_skew", LossSkew);

}  // namespace divsim
