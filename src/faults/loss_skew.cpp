// loss_skew: the chosen ranks compute the loss with another hyper-parameter (seed 002 §3.5: two cards
// ran an ASL implementation with margin 0.05, the others 0.1, after a partial code update). The
// allreduce averages gradients of different objectives: replicas stay in sync, but the chosen ranks'
// local loss and grad norm differ systematically and the run drifts slowly from the baseline.
//   param=label_smoothing,value=X   (cross_entropy)     param=asl_margin,value=X   (loss.type=asl)
#include "faults/fault.hpp"

namespace divsim {
namespace {

enum class Param { label_smoothing, asl_margin };
constexpr std::array<std::string_view, 2> kParams{"label_smoothing", "asl_margin"};

class LossSkew final : public Fault {
 public:
  LossSkew(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    param_ = choice_param("param", Param::label_smoothing, kParams);
    value_ = number_param("value", 0.1);
    finish_params();
    if (value_ < 0.0 || value_ >= 1.0) fail("value must be in [0, 1)");
    if (param_ == Param::asl_margin && ctx.cfg.loss.type != LossType::asl) fail("param=asl_margin needs loss.type=asl");
    if (param_ == Param::label_smoothing && ctx.cfg.loss.type != LossType::cross_entropy)
      fail("param=label_smoothing needs loss.type=cross_entropy");
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    (param_ == Param::asl_margin ? r.knobs.loss.margin : r.knobs.loss.label_smoothing) = value_;
    return std::string(kParams[static_cast<std::size_t>(param_)]) + " = " + std::to_string(value_);
  }

 private:
  Param param_ = Param::label_smoothing;
  double value_ = 0.0;
};

}  // namespace

DIVSIM_REGISTER_FAULT("loss_skew", LossSkew);

}  // namespace divsim
