// LayerNorm, https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html, over the last axis:
// inp (B, ..., C) -> out (B, ..., C), out = (inp - mean) * rstd * weight + bias per row of C, with
// rstd = 1 / sqrt(var + eps) and the biased variance. Settings: eps (default 1e-5). Params weight (ones)
// and bias (zeros), (C). Saved: mean and rstd of every row (llm.c's ln_mean / ln_rstd), float32.
// The row sums behind mean and var are accumulated in double, in one pass as E[x^2] - mean^2: float
// inputs square exactly in double, and the subtraction's relative error, ~1e-16 (mean / std)^2, stays
// below float's while |mean| / std < 3e4; past that the float inputs themselves resolve the deviations
// only to ~1e-3. Backward's two row sums are in float, as torch's (double there measured 8% slower).
// Sums run in kLanes partial sums (numerics/simd.hpp, for_lanes). Backward recomputes xhat from the
// input and the saved mean / rstd, which gives the bits forward used.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/layer.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

constexpr std::int64_t kLanes = 16;

// In lane order: rows are independent, so out-of-order execution overlaps these chains across rows.
template <class Real>
Real lane_total(const Real (&lanes)[kLanes]) {
  Real total = 0;
  for (const Real v : lanes) total += v;
  return total;
}

class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    c_ = in.back();
    eps_ = s.option("eps", 1e-5);
    if (c_ <= 0 || !(eps_ > 0.0)) throw std::logic_error("layernorm " + s.name + ": needs C > 0 and eps > 0");
    rows_per_sample_ = numel(in) / c_;
    set_output(in);
    add_param("weight", {c_}, Init::constant(1.0));
    add_param("bias", {c_}, Init::constant(0.0));
    add_saved("mean", rows_per_sample_);
    add_saved("rstd", rows_per_sample_);
  }

  // inp (B, ..., C) -> out (B, ..., C); mean, rstd (B, ...)
  void forward(const Pass& p) const override { normalize(p, p.saved[0], p.saved[1]); }
  void forward_eval(const Pass& p) const override { normalize(p, nullptr, nullptr); }

  // dweight (C) += sum over rows of dout * xhat ; dbias (C) += sum over rows of dout (the chunk's rows)
  void backward_params(const Pass& p) const override {
    const bool accumulate = p.write == GradWrite::accumulate;
    const float* mean = p.saved[0];
    const float* rstd = p.saved[1];
    float* dweight = grad_of(p, 0);
    float* dbias = grad_of(p, 1);
    // Column sums over the rows in a stack block, then stored or added onto the gradient slot: one
    // rounding per element either way, so overwrite gives the bits of adding onto zeros (as linear.cpp).
    constexpr std::int64_t kBlock = 256;
    float dweight_sums[kBlock], dbias_sums[kBlock];
    for (std::int64_t c0 = 0; c0 < c_; c0 += kBlock) {
      const std::int64_t n = std::min(kBlock, c_ - c0);
      std::fill_n(dweight_sums, n, 0.0f);
      std::fill_n(dbias_sums, n, 0.0f);
      for (std::int64_t r = 0; r < rows(p); ++r) {
        const float* x = p.x[0] + r * c_ + c0;
        const float* dy = p.dy + r * c_ + c0;
        const float row_mean = mean[r], row_rstd = rstd[r];
        for (std::int64_t c = 0; c < n; ++c) {
          dweight_sums[c] += dy[c] * ((x[c] - row_mean) * row_rstd);
          dbias_sums[c] += dy[c];
        }
      }
      for (std::int64_t c = 0; c < n; ++c) {
        dweight[c0 + c] = accumulate ? dweight[c0 + c] + dweight_sums[c] : dweight_sums[c];
        dbias[c0 + c] = accumulate ? dbias[c0 + c] + dbias_sums[c] : dbias_sums[c];
      }
    }
  }

  // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, with g = dout * weight
  DIVSIM_WIDE_VECTORS void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const float* weight = weight_of(p, 0);
    const float* mean = p.saved[0];
    const float* rstd = p.saved[1];
    const float inv_c = 1.0f / static_cast<float>(c_);
    for (std::int64_t r = 0; r < rows(p); ++r) {
      const float* x = p.x[0] + r * c_;
      const float* dy = p.dy + r * c_;
      float* dx = p.dx[0] + r * c_;
      const float row_mean = mean[r], row_rstd = rstd[r];
      float g_sums[kLanes] = {}, gxhat_sums[kLanes] = {};
      for_lanes<kLanes>(c_, [&](std::int64_t c, std::int64_t lane) {
        const float g = dy[c] * weight[c];
        const float xhat = (x[c] - row_mean) * row_rstd;
        g_sums[lane] += g;
        gxhat_sums[lane] += g * xhat;
      });
      const float g_mean = lane_total(g_sums) * inv_c;
      const float gxhat_mean = lane_total(gxhat_sums) * inv_c;
      for (std::int64_t c = 0; c < c_; ++c) {
        const float xhat = (x[c] - row_mean) * row_rstd;
        dx[c] = row_rstd * (dy[c] * weight[c] - g_mean - xhat * gxhat_mean);
      }
    }
  }

 private:
  std::int64_t rows(const Pass& p) const { return p.rows * rows_per_sample_; }

  // Writes out and, unless null, each row's mean and rstd.
  DIVSIM_WIDE_VECTORS void normalize(const Pass& p, float* mean_out, float* rstd_out) const {
    const float* weight = weight_of(p, 0);
    const float* bias = weight_of(p, 1);
    const double inv_c = 1.0 / static_cast<double>(c_);
    for (std::int64_t r = 0; r < rows(p); ++r) {
      const float* x = p.x[0] + r * c_;
      float* y = p.y + r * c_;
      double sums[kLanes] = {}, squares[kLanes] = {};
      for_lanes<kLanes>(c_, [&](std::int64_t c, std::int64_t lane) {
        const auto v = static_cast<double>(x[c]);
        sums[lane] += v;
        squares[lane] += v * v;
      });
      const double mean_d = lane_total(sums) * inv_c;
      const double var = std::max(lane_total(squares) * inv_c - mean_d * mean_d, 0.0);
      const auto mean = static_cast<float>(mean_d);
      const auto rstd = static_cast<float>(1.0 / std::sqrt(var + eps_));
      if (mean_out) {
        mean_out[r] = mean;
        rstd_out[r] = rstd;
      }
      for (std::int64_t c = 0; c < c_; ++c) y[c] = (x[c] - mean) * rstd * weight[c] + bias[c];
    }
  }

  std::int64_t c_ = 0, rows_per_sample_ = 1;
  double eps_ = 1e-5;
};

}  // namespace

DIVSIM_REGISTER_LAYER("layernorm", LayerNorm);

}  // namespace divsim
