// SGD and AdamW as torch 1.13's _single_tensor_sgd / _single_tensor_adamw compute them on a CPU:
// every torch op is one float32 rounding, in torch's order, with Python-float (double) scalars cast
// to float where torch casts them. Not here: amsgrad, maximize, dampening, parameter groups.
//
// Rounding control. torch's vectorised CPU kernels fuse `self + alpha * other` (add/sub with alpha,
// addcmul) into one FMA when the CPU has FMA; we do the same with std::fma. Everything torch rounds
// separately must stay separate here, but GCC contracts a*b + c into an FMA across statements in C++
// whenever the target has one; rounded_mul() is a product the compiler cannot contract. With this,
// 5 steps over 100003 random elements came out bit-identical to Debian's torch 1.13.1 (AVX2 kernels).
#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace divsim {
namespace {

#ifdef FP_FAST_FMAF
// With hardware FMA: torch's AVX2/AVX-512 kernels fuse, so do we; fma(a, b, -0) is the product rounded
// once (for every a*b, signed zeros included) and, being an fma already, is never contracted further.
inline float fused(float a, float b, float c) { return std::fma(a, b, c); }
inline float rounded_mul(float a, float b) { return std::fma(a, b, -0.0f); }
#else
// Without it torch's kernels round the product and the sum separately, and so does the compiler.
inline float fused(float a, float b, float c) { return a * b + c; }
inline float rounded_mul(float a, float b) { return a * b; }
#endif

// Calls f(std::true_type) or f(std::false_type): a run-time flag becomes a compile-time one, so that
// flags are hoisted out of element loops and every variant vectorises.
template <class F>
void dispatch(bool flag, F&& f) {
  flag ? f(std::true_type{}) : f(std::false_type{});
}

void check_sizes(std::span<float> params, std::span<const float> grads, std::size_t n, const char* who) {
  if (params.size() != n || grads.size() != n) {
    throw std::invalid_argument(std::string(who) + ": built for " + std::to_string(n) + " parameters, got " +
                                std::to_string(params.size()) + " parameters and " +
                                std::to_string(grads.size()) + " gradients");
  }
}

// https://pytorch.org/docs/1.13/generated/torch.optim.SGD.html (dampening 0)
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimSection& cfg, std::size_t n)
      : n_(n),
        momentum_(static_cast<float>(cfg.momentum)),
        weight_decay_(static_cast<float>(cfg.weight_decay)),
        nesterov_(cfg.nesterov),
        buf_(cfg.momentum != 0.0 ? n : 0) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_sizes(params, grads, n_, "SGD");
    // torch creates the momentum buffer as a copy of the first step's d_p.
    const auto neg_lr = static_cast<float>(-lr);
    dispatch(weight_decay_ != 0.0f, [&](auto decay) {
      dispatch(momentum_ != 0.0f, [&](auto momentum) {
        dispatch(steps_ == 0, [&](auto first) {
          dispatch(nesterov_, [&](auto nesterov) { update<decay(), momentum(), first(), nesterov()>(params, grads, neg_lr); });
        });
      });
    });
    ++steps_;
  }

  void reset_state() override {
    std::fill(buf_.begin(), buf_.end(), 0.0f);
    steps_ = 0;
  }
  std::span<float> state() override { return buf_; }
  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t n) override { steps_ = n; }

 private:
  template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
  void update(std::span<float> params, std::span<const float> grads, float neg_lr) {
    float* p = params.data();
    const float* g = grads.data();
    float* buf = buf_.data();
    const float wd = weight_decay_, mom = momentum_;
    for (std::size_t i = 0; i < n_; ++i) {
      // d_p = grad.add(param, alpha=weight_decay)
      float d = kDecay ? fused(p[i], wd, g[i]) : g[i];
      if constexpr (kMomentum) {
        // buf.mul_(momentum).add_(d_p): alpha 1 - dampening = 1, so the fused add is a plain add.
        buf[i] = kFirst ? d : rounded_mul(buf[i], mom) + d;
        // nesterov: d_p = d_p.add(buf, alpha=momentum); else d_p = buf
        d = kNesterov ? fused(buf[i], mom, d) : buf[i];
      }
      p[i] = fused(d, neg_lr, p[i]);  // param.add_(d_p, alpha=-lr)
    }
  }

  std::size_t n_;
  float momentum_, weight_decay_;
  bool nesterov_;
  std::vector<float> buf_;  // momentum buffer; empty without momentum
  std::int64_t steps_ = 0;
};

// https://pytorch.org/docs/1.13/generated/torch.optim.AdamW.html (amsgrad off)
class AdamW final : public Optimizer {
 public:
  AdamW(const OptimSection& cfg, std::size_t n)
      : n_(n), beta1_(cfg.beta1), beta2_(cfg.beta2), eps_(cfg.eps), weight_decay_(cfg.weight_decay),
        moments_(2 * n, 0.0f) {}

  void step(std::span<float> params, std::span<const float> grads, double lr) override {
    check_sizes(params, grads, n_, "AdamW");
    ++steps_;
    // Python-float scalars, in double as torch's adamw.py computes them (step is a whole number).
    const double t = static_cast<double>(steps_);
    const double bias_correction1 = 1.0 - std::pow(beta1_, t);
    const double bias_correction2 = 1.0 - std::pow(beta2_, t);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    // ... and where torch hands them to a float32 kernel, cast once.
    const float decay = static_cast<float>(1.0 - lr * weight_decay_);
    const float b1 = static_cast<float>(beta1_), one_minus_b1 = static_cast<float>(1.0 - beta1_);
    const float b2 = static_cast<float>(beta2_), one_minus_b2 = static_cast<float>(1.0 - beta2_);
    const float bc2_sqrt = static_cast<float>(bias_correction2_sqrt), eps = static_cast<float>(eps_);
    const float neg_step_size = static_cast<float>(-step_size);

    float* p = params.data();
    const float* g = grads.data();
    float* m = moments_.data();
    float* v = moments_.data() + n_;
    for (std::size_t i = 0; i < n_; ++i) {
      const float decayed = rounded_mul(p[i], decay);                    // param.mul_(1 - lr * wd)
      m[i] = fused(g[i], one_minus_b1, rounded_mul(m[i], b1));            // exp_avg.mul_(b1).add_(g, alpha=1-b1)
      v[i] = fused(rounded_mul(one_minus_b2, g[i]), g[i], rounded_mul(v[i], b2));  // .mul_(b2).addcmul_(g, g, value=1-b2)
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;               // (v.sqrt() / bc2_sqrt).add_(eps)
      p[i] = decayed + rounded_mul(neg_step_size, m[i]) / denom;          // addcdiv_(m, denom, value=-step_size)
    }
  }

  void reset_state() override {
    std::fill(moments_.begin(), moments_.end(), 0.0f);
    steps_ = 0;
  }
  std::span<float> state() override { return moments_; }
  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t n) override { steps_ = n; }

 private:
  std::size_t n_;
  double beta1_, beta2_, eps_, weight_decay_;
  std::vector<float> moments_;  // exp_avg [n] then exp_avg_sq [n]
  std::int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimSection& cfg, std::size_t n_params) {
  if (cfg.type == OptimizerType::sgd) {
    // torch raises the same: nesterov needs momentum (and zero dampening, which is fixed here).
    if (cfg.nesterov && cfg.momentum <= 0.0) {
      throw std::invalid_argument("optim.nesterov = true needs optim.momentum > 0, got " +
                                  std::to_string(cfg.momentum));
    }
    return std::make_unique<Sgd>(cfg, n_params);
  }
  return std::make_unique<AdamW>(cfg, n_params);
}

}  // namespace divsim
