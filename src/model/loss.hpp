#pragma once
// Training losses, forward and backward fused per row. Row reductions run in double; results are float32.
//
// cross_entropy: softmax cross-entropy with label smoothing
// (https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html):
//   loss_i = (1 - eps) * -log p_{i,y_i} + eps / C * sum_c -log p_{i,c}
//   dlogits_i = grad_scale * (p_i - ((1 - eps) onehot(y_i) + eps / C))
// asl: the asymmetric loss (Ridnik et al., ICCV 2021) that seed 002 §3.5 names, multi-label over one-hot
// targets with per-class sigmoids p = sigmoid(z) and p_m = max(p - margin, 0):
//   positive class: -(1 - p)^gamma_pos * log(p);   negative classes: -p_m^gamma_neg * log(1 - p_m)
//   loss_i = sum over classes.
// A row whose label is kIgnoredTarget (data/dataset.hpp: a padded sequence position) adds no loss, no
// count and a zero gradient, as PyTorch's ignore_index.
#include <cstdint>
#include <span>

#include "model/tensor.hpp"

namespace divsim {

struct LossSums {
  double loss = 0.0;         // sum of per-row losses
  std::int64_t correct = 0;  // rows whose argmax equals the label
  std::int64_t counted = 0;  // rows with a label (not ignored)
};

struct LossParams {
  bool asl = false;            // false: cross_entropy
  double label_smoothing = 0.0;
  double gamma_pos = 0.0, gamma_neg = 4.0, margin = 0.05;  // asl
};

// Training: losses and dlogits (dlogits may not alias logits).
LossSums loss_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels, const LossParams& loss,
                               float grad_scale, MatView dlogits);
LossSums cross_entropy_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels,
                                        double label_smoothing, float grad_scale, MatView dlogits);
LossSums asl_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels, const LossParams& loss,
                              float grad_scale, MatView dlogits);
// Evaluation: plain cross-entropy (no smoothing) and accuracy counts.
LossSums cross_entropy_eval(ConstMatView logits, std::span<const std::int32_t> labels);

}  // namespace divsim
