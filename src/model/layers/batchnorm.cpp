// BatchNorm1d / BatchNorm2d in training mode, https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html:
// per channel c, statistics over every row (and, 2d, every spatial position) that shares them: the rank's
// micro-batch, or every rank's under SyncBatchNorm. Settings: momentum (PyTorch's convention:
// running = (1-m) running + m batch), eps.
//
// Phases (StatisticsPhases): forward 0: sum of x; forward 1: sum of squared deviations from that mean
// (two passes in double: exact enough that the float results match PyTorch's Welford statistics, and
// reducible across ranks); finish: normalise, update the running statistics with the unbiased variance.
// Backward 0: sum dy and sum dy*xhat (which are also dbeta and dgamma); finish: dx.
#include <algorithm>
#include <cmath>

#include "model/layer.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

// One row of the 1d normalisation. A function of its own for the restrict parameters: through pointers
// that may alias the compiler does not vectorise.
void normalize_row(const float* __restrict x, const float* __restrict mean, const float* __restrict invstd,
                   const float* __restrict gamma, const float* __restrict beta, float* __restrict xhat,
                   float* __restrict y, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    const float h = (x[c] - mean[c]) * invstd[c];
    xhat[c] = h;
    y[c] = h * gamma[c] + beta[c];
  }
}

// The 1d layers' rows, vectorised over channels (restrict: through pointers that may alias, GCC does not).
void add_row(const float* __restrict x, double* __restrict sums, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) sums[c] += x[c];
}

void gradient_sums_row(const float* __restrict dy, const float* __restrict xhat, double* __restrict sum_dy,
                       double* __restrict sum_dy_xhat, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    sum_dy[c] += dy[c];
    sum_dy_xhat[c] += static_cast<double>(dy[c]) * xhat[c];
  }
}

void input_grad_row(const float* __restrict dy, const float* __restrict xhat, const float* __restrict scale,
                    const float* __restrict mean_dy, const float* __restrict mean_dy_xhat, float* __restrict dx,
                    std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) dx[c] = scale[c] * (dy[c] - mean_dy[c] - xhat[c] * mean_dy_xhat[c]);
}

// sums[c] += (x[c] - mean[c])^2 over one row of a 1d layer.
void squared_deviations_row(const float* __restrict x, const double* __restrict mean, double* __restrict sums,
                            std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    const double d = x[c] - mean[c];
    sums[c] += d * d;
  }
}

// One channel plane of the 2d normalisation: every value shares the channel's constants.
void normalize_plane(const float* __restrict x, float mean, float invstd, float gamma, float beta,
                     float* __restrict xhat, float* __restrict y, std::size_t n) {
  for (std::size_t s = 0; s < n; ++s) {
    const float h = (x[s] - mean) * invstd;
    xhat[s] = h;
    y[s] = h * gamma + beta;
  }
}

// Sums over one channel plane in double, in kLanes independent running sums added in a fixed order at the
// end: the order depends only on the plane's size, so every rank and chunking sums a sample the same way,
// and the lanes vectorise without reassociating anything, where a single running sum would be one chain
// of dependent adds. 1d layers (planes of one value) do not come here: they add x itself.
constexpr std::int64_t kLanes = 8;
constexpr std::size_t kBlock = 256;  // channels whose per-channel constants sit on the stack at once

template <class Term>
double plane_sum(std::size_t n, Term term) {
  double lane[kLanes] = {};
  for_lanes<kLanes>(static_cast<std::int64_t>(n),
                    [&](std::int64_t s, std::int64_t j) { lane[j] += term(static_cast<std::size_t>(s)); });
  double total = 0.0;
  for (double v : lane) total += v;
  return total;
}

double sum_of(const float* __restrict x, std::size_t n) {
  return plane_sum(n, [x](std::size_t s) { return static_cast<double>(x[s]); });
}

double squared_deviations(const float* __restrict x, double mean, std::size_t n) {
  return plane_sum(n, [x, mean](std::size_t s) {
    const double d = x[s] - mean;
    return d * d;
  });
}

double dot_of(const float* __restrict a, const float* __restrict b, std::size_t n) {
  return plane_sum(n, [a, b](std::size_t s) { return static_cast<double>(a[s]) * b[s]; });
}

// Eval mode's plane: (x - running_mean) * invstd * gamma + beta, in that order as PyTorch's CPU kernel.
void evaluate_plane(const float* __restrict x, float mean, float invstd, float gamma, float beta,
                    float* __restrict y, std::size_t n) {
  for (std::size_t s = 0; s < n; ++s) y[s] = (x[s] - mean) * invstd * gamma + beta;
}

// dx of one plane: scale * (dy - mean_dy - xhat * mean_dy_xhat)
void input_grad_plane(const float* __restrict dy, const float* __restrict xhat, float scale, float mean_dy,
                      float mean_dy_xhat, float* __restrict dx, std::size_t n) {
  for (std::size_t s = 0; s < n; ++s) dx[s] = scale * (dy[s] - mean_dy - xhat[s] * mean_dy_xhat);
}

class BatchNorm : public Layer, public StatisticsPhases {
 public:
  explicit BatchNorm(const LayerSpec& s, std::size_t rank)
      : Layer(s), momentum_(s.option("momentum", 0.1)), eps_(s.option("eps", 1e-5)) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != rank) throw std::logic_error("layer " + name() + " (" + style() + ") reads " + to_string(in));
    channels_ = in[0];
    spatial_ = numel(in) / channels_;
    set_output(in);
    add_param("weight", {channels_}, Init::constant(1.0));
    add_param("bias", {channels_}, Init::constant(0.0));
    add_buffer("running_mean", channels_, 0.0f);
    add_buffer("running_var", channels_, 1.0f);
    add_saved("xhat", numel(in));
    add_saved("mean", 0, channels_);
    add_saved("invstd", 0, channels_);
  }

  const StatisticsPhases* statistics() const override { return this; }
  // Only through the phases.
  void forward(const Pass&) const override { throw std::logic_error("BatchNorm runs in phases"); }
  void backward_input(const Pass&) const override { throw std::logic_error("BatchNorm runs in phases"); }

  int forward_phases() const override { return 2; }
  std::size_t forward_width() const override { return sz(channels_); }

  // inp (B, C[, H, W]) -> partial[C] += sum of x (phase 0) or of (x - mean)^2 (phase 1)
  void forward_partial(int phase, const Pass& p, std::span<const double> earlier, double rows,
                       std::span<double> partial) const override {
    const std::size_t C = sz(channels_), S = sz(spatial_);
    const double count = rows * static_cast<double>(spatial_);
    double* sums = partial.data();
    if (phase == 0) {
      for (std::int64_t i = 0; i < p.rows; ++i) {
        const float* x = p.x[0] + sz(i) * C * S;
        if (S == 1)
          add_row(x, sums, C);
        else
          for (std::size_t c = 0; c < C; ++c) sums[c] += sum_of(x + c * S, S);
      }
      return;
    }
    // The means for a block of channels, then the rows in memory order.
    double mean[kBlock];
    for (std::size_t c0 = 0; c0 < C; c0 += kBlock) {
      const std::size_t width = std::min(kBlock, C - c0);
      for (std::size_t j = 0; j < width; ++j) mean[j] = earlier[c0 + j] / count;
      for (std::int64_t i = 0; i < p.rows; ++i) {
        const float* x = p.x[0] + sz(i) * C * S + c0 * S;
        if (S == 1)
          squared_deviations_row(x, mean, sums + c0, width);
        else
          for (std::size_t j = 0; j < width; ++j) sums[c0 + j] += squared_deviations(x + j * S, mean[j], S);
      }
    }
  }

  void forward_finish(const Pass& p, std::span<const double> totals, double rows) const override {
    const std::size_t C = sz(channels_);
    const double count = rows * static_cast<double>(spatial_);
    float* mean = p.saved[1];
    float* invstd = p.saved[2];
    float* running_mean = p.buffers + buffer(0);
    float* running_var = p.buffers + buffer(1);
    for (std::size_t c = 0; c < C; ++c) {
      const double m = totals[c] / count, var = totals[C + c] / count;
      mean[c] = static_cast<float>(m);
      invstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps_));
      running_mean[c] = static_cast<float>((1.0 - momentum_) * running_mean[c] + momentum_ * m);
      running_var[c] = static_cast<float>((1.0 - momentum_) * running_var[c] +
                                          momentum_ * var * count / std::max(1.0, count - 1.0));
    }
    const float* gamma = weight_of(p, 0);
    const float* beta = weight_of(p, 1);
    for (std::int64_t i = 0; i < p.rows; ++i) {
      const std::size_t off = sz(i) * C * sz(spatial_);
      if (spatial_ == 1) {
        normalize_row(p.x[0] + off, mean, invstd, gamma, beta, p.saved[0] + off, p.y + off, C);
        continue;
      }
      for (std::size_t c = 0; c < C; ++c) {
        const std::size_t o = off + c * sz(spatial_);
        normalize_plane(p.x[0] + o, mean[c], invstd[c], gamma[c], beta[c], p.saved[0] + o, p.y + o, sz(spatial_));
      }
    }
  }

  // Eval mode: normalise with the running statistics.
  void forward_eval(const Pass& p) const override {
    const std::size_t C = sz(channels_), S = sz(spatial_);
    const float* running_mean = p.buffers + buffer(0);
    const float* running_var = p.buffers + buffer(1);
    const float* gamma = weight_of(p, 0);
    const float* beta = weight_of(p, 1);
    for (std::size_t c = 0; c < C; ++c) {
      const float invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps_));
      for (std::int64_t i = 0; i < p.rows; ++i) {
        const std::size_t o = (sz(i) * C + c) * S;
        evaluate_plane(p.x[0] + o, running_mean[c], invstd, gamma[c], beta[c], p.y + o, S);
      }
    }
  }

  std::size_t backward_width() const override { return 2 * sz(channels_); }

  // partial = [sum dy | sum dy*xhat] over the chunk, which are its dbeta and dgamma
  void backward_partial(const Pass& p, std::span<double> partial) const override {
    const std::size_t C = sz(channels_), S = sz(spatial_);
    double* sums = partial.data();
    for (std::int64_t i = 0; i < p.rows; ++i) {
      const float* dy = p.dy + sz(i) * C * S;
      const float* xhat = p.saved[0] + sz(i) * C * S;
      if (S == 1) {
        gradient_sums_row(dy, xhat, sums, sums + C, C);
        continue;
      }
      for (std::size_t c = 0; c < C; ++c) {
        sums[c] += sum_of(dy + c * S, S);
        sums[C + c] += dot_of(dy + c * S, xhat + c * S, S);
      }
    }
    float* dgamma = grad_of(p, 0);
    float* dbeta = grad_of(p, 1);
    if (p.write == GradWrite::overwrite) {
      std::fill_n(dgamma, C, 0.0f);
      std::fill_n(dbeta, C, 0.0f);
    }
    for (std::size_t c = 0; c < C; ++c) {
      dbeta[c] += static_cast<float>(partial[c]);
      dgamma[c] += static_cast<float>(partial[C + c]);
    }
  }

  // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy*xhat)), the means over every row sharing statistics
  void backward_finish(const Pass& p, std::span<const double> totals, double rows) const override {
    if (!p.dx[0]) return;
    const std::size_t C = sz(channels_), S = sz(spatial_);
    const double count = rows * static_cast<double>(spatial_);
    const float* gamma = weight_of(p, 0);
    const float* invstd = p.saved[2];
    const float* xhat = p.saved[0];
    // Per-channel constants for a block of channels, then the rows in memory order.
    float mean_dy[kBlock], mean_dy_xhat[kBlock], scale[kBlock];
    for (std::size_t c0 = 0; c0 < C; c0 += kBlock) {
      const std::size_t width = std::min(kBlock, C - c0);
      for (std::size_t j = 0; j < width; ++j) {
        mean_dy[j] = static_cast<float>(totals[c0 + j] / count);
        mean_dy_xhat[j] = static_cast<float>(totals[C + c0 + j] / count);
        scale[j] = gamma[c0 + j] * invstd[c0 + j];
      }
      for (std::int64_t i = 0; i < p.rows; ++i) {
        const std::size_t row = sz(i) * C * S + c0 * S;
        if (S == 1) {
          input_grad_row(p.dy + row, xhat + row, scale, mean_dy, mean_dy_xhat, p.dx[0] + row, width);
          continue;
        }
        for (std::size_t j = 0; j < width; ++j) {
          const std::size_t o = row + j * S;
          input_grad_plane(p.dy + o, xhat + o, scale[j], mean_dy[j], mean_dy_xhat[j], p.dx[0] + o, S);
        }
      }
    }
  }

 private:
  double momentum_, eps_;
  std::int64_t channels_ = 0, spatial_ = 1;
};

// inp (B, C)
class BatchNorm1d final : public BatchNorm {
 public:
  explicit BatchNorm1d(const LayerSpec& s) : BatchNorm(s, 1) {}
};

// inp (B, C, H, W)
class BatchNorm2d final : public BatchNorm {
 public:
  explicit BatchNorm2d(const LayerSpec& s) : BatchNorm(s, 3) {}
};

}  // namespace

DIVSIM_REGISTER_LAYER("batchnorm1d", BatchNorm1d);
DIVSIM_REGISTER_LAYER("batchnorm2d", BatchNorm2d);

}  // namespace divsim
