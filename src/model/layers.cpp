#include "model/layers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/gemm_backend.hpp"
#include "numerics/simd.hpp"

namespace divsim {

void linear_forward(ConstMatView x, ConstMatView w, std::span<const float> b, MatView y) {
  gemm_nt(x, w, y);
  y.rowwise() += ConstVecView(b.data(), static_cast<Eigen::Index>(b.size())).transpose();
}

void linear_backward(ConstMatView dy, ConstMatView x, ConstMatView w, MatView dw, std::span<float> db, MatView dx,
                     GradWrite write) {
  const bool accumulate = write == GradWrite::accumulate;
  gemm_tn(dy, x, dw, accumulate);
  // Not dy.colwise().sum(): Eigen vectorises that reduction with alignment-dependent peeling, so its
  // bits would depend on where the buffer happens to lie in memory. Rows are added in order here, into
  // a block of column sums that is then stored or added onto db, as the product is onto dw.
  constexpr Eigen::Index kBlock = 256;
  float sums[kBlock];
  for (Eigen::Index c0 = 0; c0 < dy.cols(); c0 += kBlock) {
    const Eigen::Index n = std::min(kBlock, dy.cols() - c0);
    std::fill_n(sums, n, 0.0f);
    for (Eigen::Index i = 0; i < dy.rows(); ++i)
      for (Eigen::Index c = 0; c < n; ++c) sums[c] += dy(i, c0 + c);
    float* out = db.data() + c0;
    for (Eigen::Index c = 0; c < n; ++c) out[c] = accumulate ? out[c] + sums[c] : sums[c];
  }
  if (dx.rows() > 0) linear_input_grad(dy, w, dx);
}

void linear_input_grad(ConstMatView dy, ConstMatView w, MatView dx) { gemm_nn(dy, w, dx); }

void relu_forward(ConstMatView x, MatView y) { y = x.cwiseMax(0.0f); }

void relu_backward(ConstMatView dy, ConstMatView y, MatView dx) {
  dx = (y.array() > 0.0f).select(dy, 0.0f);
}

void dropout_apply(ConstMatView x, ConstMatView mask, MatView y) { y = x.cwiseProduct(mask); }

void bn_partial_sum(ConstMatView x, std::span<double> sum) {
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index c = 0; c < x.cols(); ++c) sum[c] += x(i, c);
}

void bn_partial_sqdev(ConstMatView x, std::span<const double> mean, std::span<double> sqdev) {
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index c = 0; c < x.cols(); ++c) {
      const double d = x(i, c) - mean[c];
      sqdev[c] += d * d;
    }
}

namespace {
// One row of bn_normalize. A function of its own for the restrict parameters: through the views the
// compiler must assume the outputs may alias the inputs and does not vectorise.
void bn_normalize_row(const float* __restrict x, const float* __restrict mean, const float* __restrict invstd,
                      const float* __restrict gamma, const float* __restrict beta, float* __restrict xhat,
                      float* __restrict y, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    const float h = (x[c] - mean[c]) * invstd[c];
    xhat[c] = h;
    y[c] = h * gamma[c] + beta[c];
  }
}
}  // namespace

void bn_normalize(ConstMatView x, std::span<const float> mean, std::span<const float> invstd,
                  std::span<const float> gamma, std::span<const float> beta, MatView xhat, MatView y) {
  const auto cols = static_cast<std::size_t>(x.cols());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const std::size_t off = static_cast<std::size_t>(i) * cols;
    bn_normalize_row(x.data() + off, mean.data(), invstd.data(), gamma.data(), beta.data(), xhat.data() + off,
                     y.data() + off, cols);
  }
}

void bn_forward_eval(ConstMatView x, std::span<const float> running_mean, std::span<const float> running_var,
                     double eps, std::span<const float> gamma, std::span<const float> beta, MatView y) {
  for (Eigen::Index c = 0; c < x.cols(); ++c) {
    const float invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      y(i, c) = (x(i, c) - running_mean[c]) * invstd * gamma[c] + beta[c];
  }
}

void bn_backward_sums(ConstMatView dy, ConstMatView xhat, std::span<double> sum_dy, std::span<double> sum_dy_xhat) {
  for (Eigen::Index i = 0; i < dy.rows(); ++i)
    for (Eigen::Index c = 0; c < dy.cols(); ++c) {
      sum_dy[c] += dy(i, c);
      sum_dy_xhat[c] += static_cast<double>(dy(i, c)) * xhat(i, c);
    }
}

void bn_backward_dx(ConstMatView dy, ConstMatView xhat, std::span<const float> invstd, std::span<const float> gamma,
                    std::span<const double> sum_dy, std::span<const double> sum_dy_xhat, double n, MatView dx) {
  // Per-feature constants for a block of columns, then the rows in memory order (a column-by-column
  // walk over row-major data strides through memory).
  constexpr Eigen::Index kBlock = 256;
  float mean_dy[kBlock], mean_dy_xhat[kBlock], scale[kBlock];
  for (Eigen::Index c0 = 0; c0 < dy.cols(); c0 += kBlock) {
    const Eigen::Index width = std::min(kBlock, dy.cols() - c0);
    for (Eigen::Index j = 0; j < width; ++j) {
      mean_dy[j] = static_cast<float>(sum_dy[c0 + j] / n);
      mean_dy_xhat[j] = static_cast<float>(sum_dy_xhat[c0 + j] / n);
      scale[j] = gamma[c0 + j] * invstd[c0 + j];
    }
    for (Eigen::Index i = 0; i < dy.rows(); ++i)
      for (Eigen::Index j = 0; j < width; ++j)
        dx(i, c0 + j) = scale[j] * (dy(i, c0 + j) - mean_dy[j] - xhat(i, c0 + j) * mean_dy_xhat[j]);
  }
}

DIVSIM_WIDE_VECTORS void activation_stats(ConstMatView a, std::span<double, kStatCount> out) {
  // 32 lanes of partial sums, minima and maxima in a fixed pattern, combined in a fixed order: one
  // chain of dependent additions is latency-bound (8 lanes, one vector, ran 5x slower than 32).
  constexpr std::size_t kLanes = 32;
  double sum[kLanes] = {}, sum2[kLanes] = {}, lo[kLanes], hi[kLanes];
  std::fill_n(lo, kLanes, std::numeric_limits<double>::infinity());
  std::fill_n(hi, kLanes, -std::numeric_limits<double>::infinity());
  const float* v = a.data();
  const auto n = static_cast<std::size_t>(a.size());
  const std::size_t body = n - n % kLanes;
  auto add = [&](std::size_t k, double x) {
    sum[k] += x;
    sum2[k] += x * x;
    lo[k] = std::min(lo[k], x);
    hi[k] = std::max(hi[k], x);
  };
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) add(k, v[i + k]);
  for (std::size_t i = body; i < n; ++i) add(i - body, v[i]);
  for (std::size_t k = 1; k < kLanes; ++k) {
    sum[0] += sum[k];
    sum2[0] += sum2[k];
    lo[0] = std::min(lo[0], lo[k]);
    hi[0] = std::max(hi[0], hi[k]);
  }
  const double count = static_cast<double>(n);
  const double mean = n > 0 ? sum[0] / count : 0.0;
  out[0] = mean;
  out[1] = n > 0 ? std::sqrt(std::max(0.0, sum2[0] / count - mean * mean)) : 0.0;
  out[2] = n > 0 ? lo[0] : 0.0;
  out[3] = n > 0 ? hi[0] : 0.0;
  out[4] = std::sqrt(sum2[0]);
}

}  // namespace divsim
