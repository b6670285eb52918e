// Multi-head self-attention, the part between the qkv and the output projections (llm.c's
// attention_forward): inp (B, T, 3C) holding q, k, v side by side on the last axis, as a qkv Linear
// writes them -> out (B, T, C), per head h (of NH, head size HS = C / NH)
//   out[:, h] = softmax(q_h k_h^T / sqrt(HS) + mask) v_h
// with mask -inf above the diagonal when causal (GPT), none otherwise (ViT). Settings: heads (NH),
// causal (1/0). No params. Saved: att, the probabilities (B, NH, T, T) (zero above the diagonal when
// causal). Workspace: one (sample, head)'s operands and results, and in eval its probabilities.
// The products of a (sample, head), q k^T and P v forward, P^T dout, dout v^T, dS k and dS^T q backward,
// go to gemm_* on copies of its q, k, v, dout gathered into the workspace (the kernels take contiguous
// row-major operands; the heads are strided slices).
// Their operands are rounded to the replica's matmul format as linear.cpp's are. The rounding scratch
// areas are named for Linear's operands; here a product may have two activation operands (q k^T, P v),
// and the second one takes the weight area so that both survive until the product runs.
// products() stays empty: MatrixProduct describes a product with a weight (y = x w^T, dw += dy^T x),
// and attention multiplies activations by activations.
// Softmax in float32 after subtracting the row max, exp from numerics/branchless_math.hpp (vectorised).
// Evaluation mode runs the same products with the probabilities of one (sample, head) at a time in the
// workspace instead of saving them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "model/gemm_backend.hpp"
#include "model/layer.hpp"
#include "numerics/branchless_math.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

constexpr std::int64_t kLanes = 16;

// In lane order: rows are independent, so out-of-order execution overlaps these chains across rows.
float lane_total(const float (&lanes)[kLanes]) {
  float total = 0.0f;
  for (const float v : lanes) total += v;
  return total;
}
float lane_max(const float (&lanes)[kLanes]) {
  float m = lanes[0];
  for (const float v : lanes) m = std::max(m, v);
  return m;
}

// rows x width floats at src (row stride `stride`) <-> a contiguous rows x width block at dst.
void gather(const float* src, std::int64_t stride, std::int64_t rows, std::int64_t width, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r) copy_short(src + r * stride, width, dst + r * width);
}
void scatter(const float* src, std::int64_t rows, std::int64_t width, float* dst, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) copy_short(src + r * width, width, dst + r * stride);
}

class Attention final : public Layer {
 public:
  explicit Attention(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    nh_ = static_cast<std::int64_t>(s.option("heads"));
    causal_ = s.option("causal") != 0.0;
    if (in.size() != 2 || in[1] % 3 != 0)
      throw std::logic_error("attention " + s.name + ": input must be (T, 3C), got " + to_string(in));
    t_ = in[0];
    c_ = in[1] / 3;
    if (nh_ <= 0 || c_ % nh_ != 0)
      throw std::logic_error("attention " + s.name + ": C = " + std::to_string(c_) + " is not a multiple of heads");
    hs_ = c_ / nh_;
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs_)));
    set_output({t_, c_});
    add_saved("att", nh_ * t_ * t_);
    // q, k, v, dout, then out / dq, dk, dv (T x HS each), then dP / dS or eval's P (T x T)
    add_workspace(0, 7 * t_ * hs_ + t_ * t_);
  }

  // inp (B, T, 3C) -> out (B, T, C); att (B, NH, T, T)
  void forward(const Pass& p) const override {
    for (std::int64_t b = 0; b < p.rows; ++b)
      for (std::int64_t h = 0; h < nh_; ++h) attend(p, b, h, p.saved[0] + (b * nh_ + h) * t_ * t_);
  }

  void forward_eval(const Pass& p) const override {
    const Scratch s = scratch(p);
    for (std::int64_t b = 0; b < p.rows; ++b)
      for (std::int64_t h = 0; h < nh_; ++h) attend(p, b, h, s.dscores);
  }

  // dinp (B, T, 3C) = (dq, dk, dv): dv = P^T dout ; dP = dout v^T ; dS = P * (dP - rowsum(P * dP)) / sqrt(HS) ;
  // dq = dS k ; dk = dS^T q
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const Scratch s = scratch(p);
    for (std::int64_t b = 0; b < p.rows; ++b) {
      const float* qkv = p.x[0] + b * t_ * 3 * c_;
      float* dqkv = p.dx[0] + b * t_ * 3 * c_;
      for (std::int64_t h = 0; h < nh_; ++h) {
        gather(qkv + h * hs_, 3 * c_, t_, hs_, s.q);
        gather(qkv + c_ + h * hs_, 3 * c_, t_, hs_, s.k);
        gather(qkv + 2 * c_ + h * hs_, 3 * c_, t_, hs_, s.v);
        gather(p.dy + b * t_ * c_ + h * hs_, c_, t_, hs_, s.dout);
        const float* att = p.saved[0] + (b * nh_ + h) * t_ * t_;
        gemm_tn(round(p, OperandRounding::activation, att, t_), round(p, OperandRounding::gradient, s.dout, hs_),
                MatView(s.dv, t_, hs_), false);
        gemm_nt(round(p, OperandRounding::gradient, s.dout, hs_), round(p, OperandRounding::weight, s.v, hs_),
                MatView(s.dscores, t_, t_));
        softmax_backward_rows(att, s.dscores);
        gemm_nn(round(p, OperandRounding::gradient, s.dscores, t_), round(p, OperandRounding::weight, s.k, hs_),
                MatView(s.dq, t_, hs_));
        gemm_tn(round(p, OperandRounding::gradient, s.dscores, t_), round(p, OperandRounding::activation, s.q, hs_),
                MatView(s.dk, t_, hs_), false);
        scatter(s.dq, t_, hs_, dqkv + h * hs_, 3 * c_);
        scatter(s.dk, t_, hs_, dqkv + c_ + h * hs_, 3 * c_);
        scatter(s.dv, t_, hs_, dqkv + 2 * c_ + h * hs_, 3 * c_);
      }
    }
  }

 private:
  struct Scratch {
    float *q, *k, *v, *dout, *out, *dq, *dk, *dv, *dscores;
  };
  Scratch scratch(const Pass& p) const {
    float* base = p.work.data();
    const std::int64_t n = t_ * hs_;
    // out shares dq's place: forward and backward never need both.
    return {base, base + n, base + 2 * n, base + 3 * n, base + 4 * n, base + 4 * n, base + 5 * n, base + 6 * n, base + 7 * n};
  }

  // A contiguous T x cols operand in the replica's matmul format.
  ConstMatView round(const Pass& p, OperandRounding::Role role, const float* m, std::int64_t cols) const {
    return (*p.round)(role, ConstMatView(m, t_, cols));
  }

  std::int64_t keys(std::int64_t query) const { return causal_ ? query + 1 : t_; }

  // att (T, T) holds q k^T; becomes softmax(q k^T / sqrt(HS) + mask) row by row.
  DIVSIM_WIDE_VECTORS void softmax_rows(float* att) const {
    for (std::int64_t i = 0; i < t_; ++i) {
      float* a = att + i * t_;
      const std::int64_t n = keys(i);
      float maxima[kLanes];
      std::fill_n(maxima, kLanes, -std::numeric_limits<float>::infinity());
      for_lanes<kLanes>(n, [&](std::int64_t j, std::int64_t lane) {
        a[j] *= scale_;
        maxima[lane] = std::max(maxima[lane], a[j]);
      });
      const float row_max = lane_max(maxima);
      float sums[kLanes] = {};
      for_lanes<kLanes>(n, [&](std::int64_t j, std::int64_t lane) {
        a[j] = exp_branchless(a[j] - row_max);
        sums[lane] += a[j];
      });
      const float inv_sum = 1.0f / lane_total(sums);
      for (std::int64_t j = 0; j < n; ++j) a[j] *= inv_sum;
      std::fill(a + n, a + t_, 0.0f);
    }
  }

  // dscores (T, T) holds dP = dout v^T; becomes dS = P * (dP - sum_j P dP) / sqrt(HS), the gradient
  // w.r.t. q k^T (zero above the diagonal when causal, where P is).
  DIVSIM_WIDE_VECTORS void softmax_backward_rows(const float* att, float* dscores) const {
    for (std::int64_t i = 0; i < t_; ++i) {
      const float* a = att + i * t_;
      float* d = dscores + i * t_;
      const std::int64_t n = keys(i);
      float sums[kLanes] = {};
      for_lanes<kLanes>(n, [&](std::int64_t j, std::int64_t lane) { sums[lane] += a[j] * d[j]; });
      const float row_dot = lane_total(sums);
      for (std::int64_t j = 0; j < n; ++j) d[j] = a[j] * (d[j] - row_dot) * scale_;
      std::fill(d + n, d + t_, 0.0f);
    }
  }

  // out[b, :, h] = softmax(q_h k_h^T / sqrt(HS) + mask) v_h for sample b, the probabilities into att (T, T).
  void attend(const Pass& p, std::int64_t b, std::int64_t h, float* att) const {
    const Scratch s = scratch(p);
    const float* qkv = p.x[0] + b * t_ * 3 * c_;
    gather(qkv + h * hs_, 3 * c_, t_, hs_, s.q);
    gather(qkv + c_ + h * hs_, 3 * c_, t_, hs_, s.k);
    gather(qkv + 2 * c_ + h * hs_, 3 * c_, t_, hs_, s.v);
    gemm_nt(round(p, OperandRounding::activation, s.q, hs_), round(p, OperandRounding::weight, s.k, hs_), MatView(att, t_, t_));
    softmax_rows(att);
    gemm_nn(round(p, OperandRounding::activation, att, t_), round(p, OperandRounding::weight, s.v, hs_), MatView(s.out, t_, hs_));
    scatter(s.out, t_, hs_, p.y + b * t_ * c_ + h * hs_, c_);
  }

  std::int64_t t_ = 0, c_ = 0, nh_ = 1, hs_ = 0;
  bool causal_ = true;
  float scale_ = 1.0f;
};

}  // namespace

DIVSIM_REGISTER_LAYER("attention", Attention);

}  // namespace divsim
