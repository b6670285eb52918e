#pragma once
// Softmax cross-entropy with label smoothing, forward and backward fused per row
// (https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html):
//   loss_i = (1 - eps) * -log p_{i,y_i} + eps / C * sum_c -log p_{i,c}
//   dlogits_i = grad_scale * (p_i - ((1 - eps) onehot(y_i) + eps / C))
// Row reductions (max, log-sum-exp) run in double; the results are stored as float32.
#include <cstdint>
#include <span>

#include "model/tensor.hpp"

namespace divsim {

struct LossSums {
  double loss = 0.0;        // sum of per-row losses
  std::int64_t correct = 0; // rows whose argmax equals the label
};

// Training: losses and dlogits (dlogits may not alias logits).
LossSums cross_entropy_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels,
                                        double label_smoothing, float grad_scale, MatView dlogits);
// Evaluation: plain cross-entropy (no smoothing) and accuracy counts.
LossSums cross_entropy_eval(ConstMatView logits, std::span<const std::int32_t> labels);

}  // namespace divsim
