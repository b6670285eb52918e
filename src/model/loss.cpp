#include "model/loss.hpp"

#include <cmath>

namespace divsim {
namespace {

struct RowSoftmax {
  double max = 0.0, log_sum_exp = 0.0;  // log p_c = logit_c - max - log_sum_exp
  Eigen::Index argmax = 0;
};

RowSoftmax row_softmax(ConstMatView logits, Eigen::Index i) {
  RowSoftmax r;
  r.max = logits(i, 0);
  for (Eigen::Index c = 1; c < logits.cols(); ++c)
    if (logits(i, c) > r.max) {
      r.max = logits(i, c);
      r.argmax = c;
    }
  double s = 0.0;
  for (Eigen::Index c = 0; c < logits.cols(); ++c) s += std::exp(logits(i, c) - r.max);
  r.log_sum_exp = std::log(s);
  return r;
}

}  // namespace

LossSums cross_entropy_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels,
                                        double label_smoothing, float grad_scale, MatView dlogits) {
  LossSums sums;
  const auto classes = static_cast<double>(logits.cols());
  const double off = label_smoothing / classes;  // target mass on every class
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    const RowSoftmax r = row_softmax(logits, i);
    const Eigen::Index y = labels[i];
    double sum_neg_logp = 0.0;
    for (Eigen::Index c = 0; c < logits.cols(); ++c) {
      const double logp = logits(i, c) - r.max - r.log_sum_exp;
      sum_neg_logp -= logp;
      const double target = off + (c == y ? 1.0 - label_smoothing : 0.0);
      dlogits(i, c) = grad_scale * static_cast<float>(std::exp(logp) - target);
    }
    const double nll = -(logits(i, y) - r.max - r.log_sum_exp);
    sums.loss += (1.0 - label_smoothing) * nll + off * sum_neg_logp;
    sums.correct += r.argmax == y;
  }
  return sums;
}

LossSums cross_entropy_eval(ConstMatView logits, std::span<const std::int32_t> labels) {
  LossSums sums;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    const RowSoftmax r = row_softmax(logits, i);
    sums.loss -= logits(i, labels[i]) - r.max - r.log_sum_exp;
    sums.correct += r.argmax == labels[i];
  }
  return sums;
}

}  // namespace divsim
