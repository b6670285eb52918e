#include "train/replica.hpp"

#include <string>

namespace divsim {

const char* to_string(GradStage s) {
  switch (s) {
    case GradStage::computed: return "computed";
    case GradStage::local: return "local";
    case GradStage::reduced: return "reduced";
    case GradStage::unscaled: return "unscaled";
    case GradStage::clipped: return "clipped";
    case GradStage::applied: return "applied";
  }
  return "?";
}

void GradientBuffer::advance(GradStage from, GradStage to, const char* stage) {
  if (stage_ != from)
    throw std::logic_error(std::string("gradient stage ") + stage + " needs a " + to_string(from) + " gradient; it is " +
                           to_string(stage_));
  stage_ = to;
}

void GradientBuffer::applied() {
  if (loss_scale_ != 1.0)
    throw std::logic_error("gradient stage apply: the gradient still carries a loss scale of " + std::to_string(loss_scale_));
  advance(GradStage::clipped, GradStage::applied, "apply");
}

}  // namespace divsim
