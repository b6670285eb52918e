#pragma once
// One logical rank's state: its replica of the model, its gradient, its optimizer, its BN buffers and its
// activation workspace. A process holds one Replica per logical rank it simulates; everything a fault may
// make rank-specific lives here, so two replicas never share state by accident.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "model/loss.hpp"
#include "model/model.hpp"
#include "numerics/bits.hpp"
#include "optim/optimizer.hpp"

namespace divsim {

// Per-rank settings of the current step. The step loop resets them from the configuration before every
// step and faults then change them for their ranks: this is the whole surface through which a fault
// acts on one rank's computation (faults/fault.hpp), so the loop itself names no fault.
struct RankKnobs {
  MatmulFormat matmul = MatmulFormat::fp32;  // precision of the matmul inputs
  LossParams loss;
  std::uint64_t dropout_seed = 0, augment_seed = 0;
  double clip_norm = 0.0;              // 0 = no clipping
  std::int64_t schedule_step = 0;      // the step index the LR schedule is evaluated at
  bool participates = true;            // takes part in the gradient allreduce
  bool stale_gradient = false;         // left out: apply the last reduced gradient instead of its own
  bool receives_buffers = true;        // DDP's buffer broadcast reaches this rank
  bool local_overflow_check = false;   // AMP: decide overflow on the local gradient, before the reduction
  int extra_updates = 0;               // +1: one more (local) optimizer update this step, -1: none
  double ring_bucket_cap_mb = 0.0;     // > 0: this rank's reduced gradient comes from a ring of this bucket size
  std::uint32_t ring_rotation = 0;     // ... and this ring rotation
  bool own_ring = false;               // true when the two fields above apply
};

// Where a rank's gradient is in a step (Run::train runs the stages in this order): the engine's
// partials, scaled by the loss scale -> the rank's own (the reducer has combined its local parts; faults
// corrupt it here) -> reduced (summed over the ranks and divided) -> unscaled (loss scale removed) ->
// clipped -> applied by the optimizer (or the update skipped).
enum class GradStage { computed, local, reduced, unscaled, clipped, applied };
const char* to_string(GradStage s);

// A rank's gradient area (grad_parts x num_params floats): memory of its own, or memory the reducer lends
// (the tree reducer's node-shared window, which the node's other processes read in place). It carries
// its stage in the step, the loss scale its values carry and the divisor the reduction applied, so that
// a stage run out of order (a second division, an update before the unscaling) is an error, not a
// silently wrong step.
class GradientBuffer {
 public:
  GradientBuffer() = default;
  GradientBuffer(const GradientBuffer&) = delete;  // view_ would point into the other's memory
  GradientBuffer& operator=(const GradientBuffer&) = delete;
  GradientBuffer(GradientBuffer&&) noexcept = default;  // a moved vector keeps its storage: view_ stays valid
  GradientBuffer& operator=(GradientBuffer&&) noexcept = default;

  // From now on the gradients live in `memory` (nothing happens when it is empty); assign must then ask
  // for exactly its size.
  void lend(std::span<float> memory) {
    if (memory.empty()) return;
    own_.clear();
    view_ = memory;
    lent_ = true;
  }
  void assign(std::size_t n, float value) {
    if (!lent_) {
      own_.assign(n, value);
      view_ = own_;
      return;
    }
    if (n != view_.size()) throw std::logic_error("the reducer lent gradient memory of another size");
    std::fill(view_.begin(), view_.end(), value);
  }
  float* data() const { return view_.data(); }
  std::size_t size() const { return view_.size(); }
  float* begin() const { return view_.data(); }
  float* end() const { return view_.data() + view_.size(); }
  float& operator[](std::size_t i) const { return view_[i]; }
  // std::span<float> and std::span<const float> take it implicitly as a contiguous range (data, size,
  // begin, end); conversion operators as well would give the compiler two routes to choose between.

  // A new step: the engine writes values scaled by `loss_scale`.
  void begin_step(double loss_scale) {
    stage_ = GradStage::computed;
    loss_scale_ = loss_scale;
    divisor_ = 0.0;
  }
  // Stage `from` -> `to`; std::logic_error naming `stage` when the gradient is not at `from`.
  void advance(GradStage from, GradStage to, const char* stage);
  void reduced(double divisor) {
    advance(GradStage::local, GradStage::reduced, "reduce");
    divisor_ = divisor;
  }
  // Unscaled, or (AMP overflow) left scaled with the update to be skipped: applied() refuses it then.
  void unscaled(bool skipped) {
    advance(GradStage::reduced, GradStage::unscaled, "unscale");
    if (!skipped) loss_scale_ = 1.0;
  }
  void applied();  // clipped -> applied, refused while the values still carry a loss scale
  GradStage stage() const { return stage_; }
  double loss_scale() const { return loss_scale_; }  // the factor the values carry
  double divisor() const { return divisor_; }        // what the reduction divided by (0 before it)

 private:
  std::vector<float> own_;
  std::span<float> view_;  // own_, or the lent memory
  bool lent_ = false;
  GradStage stage_ = GradStage::applied;
  double loss_scale_ = 1.0, divisor_ = 0.0;
};

struct Replica {
  int rank = 0;                   // logical rank
  std::vector<float> params;      // flat, Model::tensors() layout
  GradientBuffer grads;           // grad_parts x num_params partial gradients
  std::vector<float> buffers;     // BN running statistics
  std::unique_ptr<Optimizer> optimizer;
  RankKnobs knobs;
  std::uint64_t init_seed = 0;      // the seed its parameters were initialised with
  bool receives_init = true;        // takes rank 0's initial parameters (dist.broadcast_init)
  double loss_scale = 1.0;          // AMP dynamic loss scale (1 without AMP)
  std::int64_t good_steps = 0;      // AMP: steps since the last overflow
  std::vector<float> last_grad;     // the last reduced gradient (skip_rank mode=stale)
  std::vector<float> own_grad;      // its own mean gradient before the reduction, when a fault needs it

  // Workspace for one micro-batch (rows = micro_batch), allocated once.
  std::vector<std::int64_t> samples;   // global sample indices of the current micro-batch
  std::vector<std::int64_t> step_samples;  // all samples of the step (accum x micro), for recording
  std::vector<std::int32_t> labels;
  std::vector<float> input;            // [micro, in_features]: activation 0
  std::vector<std::vector<float>> act;       // per activation: [micro, features] (act[0] unused: input)
  std::vector<std::vector<float>> act_grad;  // per activation: d loss / d activation (act_grad[0] unused)
  std::vector<std::vector<std::vector<float>>> saved;  // per layer: its SavedSpec tensors
  std::vector<double> loss_parts;      // per chunk: sum of per-sample losses in the current step

  // Per-step results.
  double loss_sum = 0.0;   // over the rank's samples of the step
  std::int64_t correct = 0;
};

}  // namespace divsim
