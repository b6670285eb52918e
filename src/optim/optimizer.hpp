#pragma once
// Optimizers over ONE flat parameter buffer and ONE flat gradient buffer (all model parameters
// concatenated): PyTorch 1.13's SGD (momentum, nesterov, weight decay; dampening 0) and AdamW,
// reproducing torch's single-tensor CPU path operation by operation in float32, with the scalar
// coefficients computed in double as Python does, so a PyTorch replay on the same CPU agrees bit for
// bit (checked on an AVX2/FMA CPU; see optimizer.cpp for the rounding control).
//
// Deliberately not here: per-parameter groups, amsgrad, maximize, dampening, foreach/fused variants,
// and any allocation after construction (step() works in the state allocated by make_optimizer).
// Gradient clipping (clip.hpp) and the learning-rate schedule (schedule.hpp) are separate so faults
// can hook them independently.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "config/run_config.hpp"

namespace divsim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr. grads are the (already reduced, clipped) gradients.
  virtual void step(std::span<float> params, std::span<const float> grads, double lr) = 0;
  // Forget momentum / moments and the step count (a rank resumed without optimizer state).
  virtual void reset_state() = 0;
  // All state floats (for checkpoints and hashes): SGD the momentum buffer (empty without momentum),
  // AdamW exp_avg followed by exp_avg_sq.
  virtual std::span<float> state() = 0;
  virtual std::int64_t steps_taken() const = 0;
  virtual void set_steps_taken(std::int64_t n) = 0;  // for checkpoint restore
};

// cfg.type is "sgd" or "adamw"; throws std::invalid_argument naming the optim.* key on a bad setting.
// All state is allocated here, none in step().
std::unique_ptr<Optimizer> make_optimizer(const OptimSection& cfg, std::size_t n_params);

}  // namespace divsim
