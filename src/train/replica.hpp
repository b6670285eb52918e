#pragma once
// One logical rank's state: its replica of the model, its gradient, its optimizer, its BN buffers and its
// activation workspace. A process holds one Replica per logical rank it simulates; everything a fault may
// make rank-specific lives here, so two replicas never share state by accident.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/mlp.hpp"
#include "numerics/bits.hpp"
#include "optim/optimizer.hpp"

namespace divsim {

struct Replica {
  int rank = 0;                   // logical rank
  std::vector<float> params;      // flat, Mlp::tensors() layout
  std::vector<float> grads;       // grad_parts x num_params partial gradients
  std::vector<float> buffers;     // BN running statistics
  std::unique_ptr<Optimizer> optimizer;
  MatmulFormat matmul = MatmulFormat::fp32;

  // Workspace for one micro-batch (rows = micro_batch), allocated once.
  std::vector<std::int64_t> samples;   // global sample indices of the current micro-batch
  std::vector<std::int64_t> step_samples;  // all samples of the step (accum x micro), for recording
  std::vector<std::int32_t> labels;
  std::vector<float> input;            // [micro, in_features]
  std::vector<std::vector<float>> out; // per layer: [micro, layer.out]
  std::vector<std::vector<float>> aux; // per layer: BN xhat / dropout mask, [micro, layer.out]
  std::vector<std::vector<float>> bn_mean, bn_invstd;  // per layer (BN only): [layer.out]
  std::vector<float> dcur, dnext;      // backward ping-pong: gradient w.r.t. a layer's output / input
  std::vector<double> loss_parts;      // per chunk: sum of per-sample losses in the current step

  // Per-step results.
  double loss_sum = 0.0;   // over the rank's samples of the step
  std::int64_t correct = 0;
};

}  // namespace divsim
