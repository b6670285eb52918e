#include "model/loss.hpp"

#include <algorithm>
#include <cmath>

#include "data/dataset.hpp"

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
    const Eigen::Index y = labels[i];
    if (y == kIgnoredTarget) {
      dlogits.row(i).setZero();
      continue;
    }
    const RowSoftmax r = row_softmax(logits, i);
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
    ++sums.counted;
  }
  return sums;
}

LossSums asl_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels, const LossParams& loss,
                              float grad_scale, MatView dlogits) {
  LossSums sums;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    if (labels[i] == kIgnoredTarget) {
      dlogits.row(i).setZero();
      continue;
    }
    Eigen::Index argmax = 0;
    for (Eigen::Index c = 0; c < logits.cols(); ++c) {
      const double z = logits(i, c);
      if (z > logits(i, argmax)) argmax = c;
      const double p = 1.0 / (1.0 + std::exp(-z));
      double value = 0.0, grad = 0.0;  // loss term and its derivative w.r.t. z
      if (c == labels[i]) {
        // d/dz of -(1-p)^g log p = (1-p)^g (g p log p - (1 - p))
        const double log_p = -std::log1p(std::exp(-z));  // log sigmoid, stable
        const double q = std::pow(1.0 - p, loss.gamma_pos);
        value = -q * log_p;
        grad = q * (loss.gamma_pos * p * log_p - (1.0 - p));
      } else {
        const double pm = std::max(p - loss.margin, 0.0);
        if (pm > 0.0) {
          // d/dz of -pm^g log(1-pm), with dpm/dz = p (1 - p)
          const double log_1m = std::log1p(-pm);
          const double w = std::pow(pm, loss.gamma_neg);
          value = -w * log_1m;
          const double dpm = w / (1.0 - pm) - (loss.gamma_neg > 0.0 ? loss.gamma_neg * std::pow(pm, loss.gamma_neg - 1.0) * log_1m : 0.0);
          grad = p * (1.0 - p) * dpm;
        }
      }
      sums.loss += value;
      dlogits(i, c) = grad_scale * static_cast<float>(grad);
    }
    sums.correct += argmax == labels[i];
    ++sums.counted;
  }
  return sums;
}

LossSums loss_forward_backward(ConstMatView logits, std::span<const std::int32_t> labels, const LossParams& loss,
                               float grad_scale, MatView dlogits) {
  return loss.asl ? asl_forward_backward(logits, labels, loss, grad_scale, dlogits)
                  : cross_entropy_forward_backward(logits, labels, loss.label_smoothing, grad_scale, dlogits);
}

LossSums cross_entropy_eval(ConstMatView logits, std::span<const std::int32_t> labels) {
  LossSums sums;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    if (labels[i] == kIgnoredTarget) continue;
    const RowSoftmax r = row_softmax(logits, i);
    sums.loss -= logits(i, labels[i]) - r.max - r.log_sum_exp;
    sums.correct += r.argmax == labels[i];
    ++sums.counted;
  }
  return sums;
}

}  // namespace divsim
