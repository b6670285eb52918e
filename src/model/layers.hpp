#pragma once
// The MLP's layers as *_forward / *_backward pairs over row-major [B, C] activations
// (B = rows of the chunk being processed, IN/OUT/C = features). The CPU reference: Eigen (the backward
// products through OpenBLAS when built with it, model/gemm_backend.hpp), float32, no allocation;
// kernels/ holds the GPU twin. Backward functions ACCUMULATE (+=) into parameter gradients and
// OVERWRITE the input gradient.
//
// BatchNorm is split in phases around its batch statistics so the step loop can reduce the statistics
// across ranks in between (SyncBatchNorm) without the layer knowing about communication.
#include <cstdint>
#include <span>

#include "model/tensor.hpp"

namespace divsim {

// Linear, https://pytorch.org/docs/stable/generated/torch.nn.Linear.html
// y[B,OUT] = x[B,IN] w[OUT,IN]^T + b[OUT]
void linear_forward(ConstMatView x, ConstMatView w, std::span<const float> b, MatView y);
// dw[OUT,IN] += dy^T x ; db[OUT] += column sums of dy ; dx[B,IN] = dy w (skipped when dx has no rows).
// GradWrite::overwrite stores dw and db instead of adding (bit for bit adding onto zeros), so a
// step's first micro-batch needs no cleared gradient buffer. The column sums are added onto db as one
// sum each, and so is the product onto dw where accumulate_adds_rounded_product (gemm_backend.hpp)
// holds: then accumulating is adding the overwritten result, one rounding per element.
enum class GradWrite { accumulate, overwrite };
void linear_backward(ConstMatView dy, ConstMatView x, ConstMatView w, MatView dw, std::span<float> db, MatView dx,
                     GradWrite write = GradWrite::accumulate);
// Its input gradient alone, dx[B,IN] = dy w, for a caller that takes the rows in other blocks than the
// parameter gradients'.
void linear_input_grad(ConstMatView dy, ConstMatView w, MatView dx);

// ReLU: y = max(x, 0); dx = dy where y > 0 (y may alias x: the forward works in place)
void relu_forward(ConstMatView x, MatView y);
void relu_backward(ConstMatView dy, ConstMatView y, MatView dx);

// Dropout (inverted), https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html
// mask holds 0 or 1/(1-p); y = x * mask; dx = dy * mask
void dropout_apply(ConstMatView x, ConstMatView mask, MatView y);

// BatchNorm1d in training mode, https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm1d.html
// Phase 1: per-feature partial sums of the chunk, in double: sum[C] += sum_i x_ic.
void bn_partial_sum(ConstMatView x, std::span<double> sum);
// Phase 2 (after the sums of all participating rows are known): partial sum of squared deviations.
void bn_partial_sqdev(ConstMatView x, std::span<const double> mean, std::span<double> sqdev);
// Phase 3: xhat = (x - mean) * invstd ; y = gamma * xhat + beta.
void bn_normalize(ConstMatView x, std::span<const float> mean, std::span<const float> invstd,
                  std::span<const float> gamma, std::span<const float> beta, MatView xhat, MatView y);
// Eval mode: normalise with running statistics.
void bn_forward_eval(ConstMatView x, std::span<const float> running_mean, std::span<const float> running_var,
                     double eps, std::span<const float> gamma, std::span<const float> beta, MatView y);
// Backward phase 1: partial sums over the chunk, in double: sum_dy[C] += dy ; sum_dy_xhat[C] += dy*xhat.
// These are also dbeta and dgamma.
void bn_backward_sums(ConstMatView dy, ConstMatView xhat, std::span<double> sum_dy, std::span<double> sum_dy_xhat);
// Backward phase 2, with the sums over all N rows that shared the statistics:
// dx = gamma * invstd / N * (N*dy - sum_dy - xhat * sum_dy_xhat)
void bn_backward_dx(ConstMatView dy, ConstMatView xhat, std::span<const float> invstd, std::span<const float> gamma,
                    std::span<const double> sum_dy, std::span<const double> sum_dy_xhat, double n, MatView dx);

// Summary statistics of an activation (seed 000 §3.2 hooks): mean, std, min, max, l2, over all elements.
inline constexpr int kStatCount = 5;
void activation_stats(ConstMatView a, std::span<double, kStatCount> out);

}  // namespace divsim
