// Unit tests of src/optim: SGD and AdamW against closed forms and a double-precision reference of the
// update formulas, against PyTorch itself (skipped when torch cannot be imported), the learning-rate
// schedules at their boundaries, and global-norm clipping.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numbers>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "optim/clip.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"
#include "train/replica.hpp"
#include "optim/schedule.hpp"
#include "torch_peer.hpp"

using namespace divsim;

namespace {

OptimSection sgd_cfg(double momentum, bool nesterov, double weight_decay) {
  OptimSection c;
  c.type = OptimizerType::sgd;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = weight_decay;
  return c;
}

OptimSection adamw_cfg(double weight_decay) {
  OptimSection c;
  c.type = OptimizerType::adamw;
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.eps = 1e-8;
  c.weight_decay = weight_decay;
  return c;
}

// Relative agreement of float32 results with a reference; float32 rounding of a few operations per
// step stays far below 1e-5 for the well-conditioned values used here.
void expect_close(std::span<const float> got, std::span<const double> want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::max(std::abs(want[i]), 1e-6)) << what << " element " << i;
  }
}

}  // namespace

TEST(OptimSgd, PlainStepIsParamMinusLrTimesGrad) {
  auto opt = make_optimizer(sgd_cfg(0.0, false, 0.0), 3);
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.5f, 0.25f, -4.0f};
  opt->step(p, g, 0.25);
  opt->step(p, g, 0.5);
  // Exactly representable: p - (0.25 + 0.5) g.
  EXPECT_EQ(p, (std::vector<float>{0.625f, -2.1875f, 3.5f}));
  EXPECT_TRUE(opt->state().empty());  // no momentum, no buffer
  EXPECT_EQ(opt->steps_taken(), 2);
}

TEST(OptimSgd, MomentumMatchesGeometricSum) {
  // Constant gradient g: buf_t = g (1 - m^t) / (1 - m), p_T = p_0 - lr sum_t buf_t.
  const double m = 0.9, lr = 0.01;
  auto opt = make_optimizer(sgd_cfg(m, false, 0.0), 2);
  std::vector<float> p = {1.0f, -3.0f};
  const std::vector<float> g = {0.3f, -1.7f};
  const int steps = 6;
  for (int t = 0; t < steps; ++t) opt->step(p, g, lr);
  std::vector<double> want(2), buf(2);
  for (std::size_t i = 0; i < 2; ++i) {
    double sum = 0;
    for (int t = 1; t <= steps; ++t) sum += (1 - std::pow(m, t)) / (1 - m);
    want[i] = (i == 0 ? 1.0 : -3.0) - lr * g[i] * sum;
    buf[i] = g[i] * (1 - std::pow(m, steps)) / (1 - m);
  }
  expect_close(p, want, 1e-6, "params");
  ASSERT_EQ(opt->state().size(), 2u);
  expect_close(opt->state(), buf, 1e-6, "momentum buffer");
}

TEST(OptimSgd, NesterovAddsMomentumTimesBuffer) {
  // Constant g: update_t = g + m buf_t with buf_t as above.
  const double m = 0.8, lr = 0.05;
  auto opt = make_optimizer(sgd_cfg(m, true, 0.0), 1);
  std::vector<float> p = {2.0f};
  const std::vector<float> g = {0.75f};
  const int steps = 4;
  double want = 2.0;
  for (int t = 1; t <= steps; ++t) {
    opt->step(p, g, lr);
    want -= lr * (0.75 + m * 0.75 * (1 - std::pow(m, t)) / (1 - m));
  }
  expect_close(p, std::vector<double>{want}, 1e-6, "params");
}

TEST(OptimSgd, WeightDecayIsAddedToTheGradient) {
  // No momentum: p <- p (1 - lr wd) - lr g, a geometric recursion with closed form
  // p_T = a^T p_0 - lr g (1 - a^T) / (1 - a), a = 1 - lr wd.
  const double lr = 0.1, wd = 0.5, a = 1 - lr * wd;
  auto opt = make_optimizer(sgd_cfg(0.0, false, wd), 2);
  std::vector<float> p = {4.0f, -1.0f};
  const std::vector<float> g = {0.0f, 2.0f};
  const int steps = 5;
  for (int t = 0; t < steps; ++t) opt->step(p, g, lr);
  const double aT = std::pow(a, steps);
  expect_close(p, std::vector<double>{aT * 4.0, aT * -1.0 - lr * 2.0 * (1 - aT) / (1 - a)}, 1e-6, "params");
}

TEST(OptimAdamW, FirstStepIsDecayMinusLrTimesSignish) {
  // Step 1: m_hat = g and v_hat = g^2 exactly, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
  const double lr = 0.01, wd = 0.1, eps = 1e-8;
  auto opt = make_optimizer(adamw_cfg(wd), 4);
  std::vector<float> p = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<float> g = {0.2f, -5.0f, 0.0f, 1e-9f};
  opt->step(p, g, lr);
  std::vector<double> want(4);
  const std::array<double, 4> p0 = {1.0, -2.0, 0.5, 3.0};
  for (std::size_t i = 0; i < 4; ++i) {
    want[i] = p0[i] * (1 - lr * wd) - lr * g[i] / (std::abs(static_cast<double>(g[i])) + eps);
  }
  expect_close(p, want, 1e-6, "params");
  EXPECT_EQ(p[2], static_cast<float>(0.5 * (1 - lr * wd)));  // zero gradient: pure decay
  EXPECT_EQ(opt->state().size(), 8u);
}

TEST(OptimAdamW, SeveralStepsMatchDoubleReference) {
  const double lr0 = 3e-3, wd = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const std::size_t n = 5;
  auto opt = make_optimizer(adamw_cfg(wd), n);
  std::vector<float> p = {0.3f, -1.1f, 2.0f, -0.02f, 0.7f};
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  std::vector<float> g(n);
  for (int t = 1; t <= 8; ++t) {
    const double lr = lr0 / t;
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(i) + t));
    opt->step(p, g, lr);
    for (std::size_t i = 0; i < n; ++i) {
      rp[i] *= 1 - lr * wd;
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = rm[i] / (1 - std::pow(b1, t)), v_hat = rv[i] / (1 - std::pow(b2, t));
      rp[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  expect_close(p, rp, 1e-6, "params");
  std::vector<double> state(rm);
  state.insert(state.end(), rv.begin(), rv.end());
  expect_close(opt->state(), state, 1e-5, "moments");
  EXPECT_EQ(opt->steps_taken(), 8);
}

TEST(OptimCommon, ResetStateBehavesLikeAFreshOptimizer) {
  for (const auto& cfg : {sgd_cfg(0.9, true, 0.01), adamw_cfg(0.01)}) {
    const std::vector<float> g1 = {0.5f, -0.25f, 1.5f}, g2 = {-0.1f, 0.3f, 0.2f};
    auto used = make_optimizer(cfg, 3);
    std::vector<float> p = {1.0f, 2.0f, -3.0f};
    used->step(p, g1, 0.1);
    used->step(p, g1, 0.1);
    used->reset_state();
    EXPECT_EQ(used->steps_taken(), 0) << name_of(cfg.type);
    EXPECT_TRUE(std::ranges::all_of(used->state(), [](float x) { return x == 0.0f; }));
    auto fresh = make_optimizer(cfg, 3);
    std::vector<float> q = p;
    used->step(p, g2, 0.1);
    fresh->step(q, g2, 0.1);
    EXPECT_EQ(p, q) << name_of(cfg.type);
    EXPECT_TRUE(std::ranges::equal(used->state(), fresh->state())) << name_of(cfg.type);
  }
}

TEST(OptimCommon, RestoredStateAndStepCountContinueBitForBit) {
  for (const auto& cfg : {sgd_cfg(0.9, false, 0.0), adamw_cfg(0.1)}) {
    const std::vector<float> g1 = {0.5f, -0.25f}, g2 = {-0.1f, 0.3f};
    auto a = make_optimizer(cfg, 2);
    std::vector<float> p = {1.0f, 2.0f};
    for (int t = 0; t < 3; ++t) a->step(p, g1, 0.01);
    auto b = make_optimizer(cfg, 2);  // a checkpoint restore: copy the state floats and the step count
    std::ranges::copy(a->state(), b->state().begin());
    b->set_steps_taken(a->steps_taken());
    std::vector<float> q = p;
    a->step(p, g2, 0.01);
    b->step(q, g2, 0.01);
    EXPECT_EQ(p, q) << name_of(cfg.type);
    EXPECT_EQ(b->steps_taken(), 4) << name_of(cfg.type);
  }
}

TEST(OptimCommon, RejectsBadConfigurationAndSizes) {
  EXPECT_THROW(make_optimizer(sgd_cfg(0.0, true, 0.0), 4), std::invalid_argument);
  auto opt = make_optimizer(adamw_cfg(0.0), 4);
  std::vector<float> p(4), g(3);
  EXPECT_THROW(opt->step(p, g, 0.1), std::invalid_argument);
}

TEST(OptimSchedule, WarmupThenConstant) {
  ScheduleSection s;
  s.type = ScheduleType::constant;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.8, 0, 100), 0.2);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.8, 2, 100), 0.6);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.8, 3, 100), 0.8);  // last warmup step reaches base
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.8, 4, 100), 0.8);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.8, 99, 100), 0.8);
}

TEST(OptimSchedule, StepDecaysAtBoundaries) {
  ScheduleSection s;
  s.type = ScheduleType::step;
  s.warmup_steps = 2;
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 0, 100), 0.5);   // warmup
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 2, 100), 1.0);   // s = 0
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 11, 100), 1.0);  // s = 9
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 12, 100), 0.5);  // s = 10
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 21, 100), 0.5);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 22, 100), 0.25);
  s.step_size = 0;
  EXPECT_THROW(scheduled_lr(s, 1.0, 5, 100), std::invalid_argument);
}

TEST(OptimSchedule, CosineFromBaseToMinLr) {
  ScheduleSection s;
  s.type = ScheduleType::cosine;
  s.warmup_steps = 10;
  s.min_lr = 0.01;
  const double base = 0.1;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, base, 9, 110), base);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, base, 10, 110), base);                    // cos(0)
  EXPECT_NEAR(scheduled_lr(s, base, 60, 110), 0.5 * (base + 0.01), 1e-15);   // cos(pi/2)
  EXPECT_NEAR(scheduled_lr(s, base, 35, 110), 0.01 + 0.045 * (1 + std::sqrt(0.5)), 1e-15);  // cos(pi/4)
  EXPECT_NEAR(scheduled_lr(s, base, 110, 110), 0.01, 1e-15);                 // end == min_lr
}

TEST(OptimClip, NormAndScaleMatchTorchFormula) {
  std::vector<float> g = {3.0f, 0.0f, -4.0f};
  const double norm = clip_grad_norm(g, 1.0);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  const auto c = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(g, (std::vector<float>{3.0f * c, 0.0f, -4.0f * c}));
  EXPECT_NEAR(l2_norm(g), 1.0, 1e-6);
}

TEST(OptimClip, SmallOrUnclippedGradientsAreLeftAlone) {
  const std::vector<float> orig = {0.1f, -0.2f, 0.3f};
  std::vector<float> g = orig;
  EXPECT_NEAR(clip_grad_norm(g, 1.0), std::sqrt(0.14), 1e-7);
  EXPECT_EQ(g, orig);
  std::vector<float> big = {30.0f, 40.0f};
  EXPECT_DOUBLE_EQ(clip_grad_norm(big, 0.0), 50.0);  // max_norm 0: report only
  EXPECT_EQ(big, (std::vector<float>{30.0f, 40.0f}));
}

TEST(OptimClip, NormAccumulatesInDoubleAndNonFiniteBehavesLikeTorch) {
  // 1e20^2 overflows float32 but not double.
  const std::vector<float> huge(4, 1e20f);
  EXPECT_NEAR(l2_norm(huge), 2.0 * static_cast<double>(1e20f), 1e6);
  // torch: coef = max_norm / (inf + 1e-6) = 0, grads *= 0, so inf -> NaN and finite -> 0.
  std::vector<float> g = {std::numeric_limits<float>::infinity(), 1.0f};
  EXPECT_TRUE(std::isinf(clip_grad_norm(g, 1.0)));
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], 0.0f);
}

TEST(OptimTorch, SgdNesterovAdamWAndClipMatchPyTorch) {
  const std::size_t n = 7;
  const std::vector<float> p0 = {0.5f, -1.25f, 3.0f, 0.0f, -0.03f, 2.5e-3f, 7.0f};
  const std::array<double, 5> lrs = {0.1, 0.08, 0.05, 0.02, 0.005};
  std::vector<std::vector<float>> grads(5, std::vector<float>(n));
  for (std::size_t t = 0; t < 5; ++t) {
    for (std::size_t i = 0; i < n; ++i) {
      grads[t][i] = static_cast<float>(std::sin(1.3 * static_cast<double>(i) + static_cast<double>(t)) *
                                        std::pow(10.0, static_cast<double>(i % 4) - 2.0));
    }
  }
  std::string script = std::string(test::kImportTorch) +
      "h = lambda s: [float.fromhex(x) for x in s.split()]\n"
      "p0 = h('" + test::hex_list(p0) + "')\n"
      "grads = [\n";
  for (const auto& g : grads) script += "  h('" + test::hex_list(g) + "'),\n";
  script += "]\nlrs = [";
  for (const double lr : lrs) script += std::to_string(lr) + ", ";
  script +=
      "]\n"
      "def run(name, make):\n"
      "    t = torch.tensor(p0, dtype=torch.float32, requires_grad=True)\n"
      "    opt = make([t])\n"
      "    for s in range(5):\n"
      "        opt.param_groups[0]['lr'] = lrs[s]\n"
      "        t.grad = torch.tensor(grads[s], dtype=torch.float32)\n"
      "        opt.step()\n"
      "    print(name, ' '.join(float(x).hex() for x in t.detach().tolist()))\n"
      "run('sgd', lambda ps: torch.optim.SGD(ps, lr=lrs[0], momentum=0.9, nesterov=True, weight_decay=0.01, foreach=False))\n"
      "run('adamw', lambda ps: torch.optim.AdamW(ps, lr=lrs[0], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=False))\n"
      "t = torch.tensor(p0, dtype=torch.float32, requires_grad=True)\n"
      "t.grad = torch.tensor(grads[2], dtype=torch.float32)\n"
      "norm = torch.nn.utils.clip_grad_norm_([t], 0.5)\n"
      "print('clip', float(norm).hex(), ' '.join(float(x).hex() for x in t.grad.tolist()))\n";
  std::string raw;
  const auto torch = test::run_python(script, raw);
  if (torch.contains("NO_TORCH")) GTEST_SKIP() << "torch cannot be imported: " << raw;
  ASSERT_TRUE(torch.contains("sgd") && torch.contains("adamw") && torch.contains("clip")) << "unexpected python output: " << raw;

  auto sgd = make_optimizer(sgd_cfg(0.9, true, 0.01), n);
  auto adamw = make_optimizer(adamw_cfg(0.01), n);
  std::vector<float> ps = p0, pa = p0;
  for (std::size_t t = 0; t < 5; ++t) {
    sgd->step(ps, grads[t], lrs[t]);
    adamw->step(pa, grads[t], lrs[t]);
  }
  std::vector<float> gc = grads[2];
  const double norm = clip_grad_norm(gc, 0.5);

  const std::vector<double>& clip_line = torch.at("clip");
  ASSERT_EQ(clip_line.size(), n + 1);
  EXPECT_NEAR(norm, clip_line[0], 1e-6 * clip_line[0]);
  const std::vector<std::pair<const char*, std::pair<std::span<const float>, std::vector<double>>>> cases = {
      {"SGD nesterov wd", {ps, torch.at("sgd")}},
      {"AdamW", {pa, torch.at("adamw")}},
      {"clip_grad_norm_", {gc, std::vector<double>(clip_line.begin() + 1, clip_line.end())}},
  };
  for (const auto& [name, pair] : cases) {
    const auto& [got, want] = pair;
    ASSERT_EQ(want.size(), n) << name;
    double max_rel = 0;
    int identical = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double rel = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-30);
      max_rel = std::max(max_rel, rel);
      identical += static_cast<double>(got[i]) == want[i];
      EXPECT_LE(rel, 1e-6) << name << " element " << i << ": divsim " << got[i] << " torch " << want[i];
    }
    std::printf("[ torch    ] %-16s max rel error %.3g, %d/%zu bit-identical: %s\n", name, max_rel, identical, n,
                max_rel <= 1e-6 ? "OK" : "NOT OK");
  }
}

// GradScaler: torch.cuda.amp.GradScaler's rules (backoff 0.5 on an overflow, growth 2 after the interval).
TEST(GradScaler, UnscalesThenGrowsAfterTheInterval) {
  const GradScaler scaler(2);
  std::vector<float> g{1024.0f, -512.0f};
  double scale = 1024.0;
  std::int64_t good = 0;
  ScalerUpdate u = scaler.unscale_or_skip(g, scale, good);
  EXPECT_FALSE(u.skipped);
  EXPECT_EQ(u.old_scale, 1024.0);
  EXPECT_EQ(g, (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(scale, 1024.0);
  EXPECT_EQ(good, 1);
  u = scaler.unscale_or_skip(g, scale, good);
  EXPECT_EQ(scale, 2048.0);  // the second good step in a row doubles it
  EXPECT_EQ(good, 0);
}

TEST(GradScaler, OverflowSkipsAndHalvesWithoutTouchingTheGradient) {
  const GradScaler scaler(100);
  for (const float bad : {70000.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> g{1.0f, bad};
    double scale = 8.0;
    std::int64_t good = 5;
    const ScalerUpdate u = scaler.unscale_or_skip(g, scale, good);
    EXPECT_TRUE(u.skipped);
    EXPECT_EQ(scale, 4.0);
    EXPECT_EQ(good, 0);
    EXPECT_EQ(g[0], 1.0f);
  }
  // A decision made elsewhere (a rank's local check) replaces the check on the values.
  std::vector<float> g{1.0f};
  double scale = 8.0;
  std::int64_t good = 0;
  EXPECT_TRUE(scaler.unscale_or_skip(g, scale, good, true).skipped);
  EXPECT_EQ(g[0], 1.0f);
}

// The gradient's stages in a step: any stage run out of order is refused.
TEST(GradientStages, RunInOrderAndRefuseAnyOther) {
  GradientBuffer g;
  g.assign(4, 1.0f);
  g.begin_step(256.0);
  EXPECT_EQ(g.stage(), GradStage::computed);
  EXPECT_THROW(g.reduced(4.0), std::logic_error);  // before the local combination
  g.advance(GradStage::computed, GradStage::local, "combine");
  g.reduced(4.0);
  EXPECT_EQ(g.divisor(), 4.0);
  EXPECT_THROW(g.reduced(4.0), std::logic_error);  // a second division
  EXPECT_THROW(g.advance(GradStage::unscaled, GradStage::clipped, "clip"), std::logic_error);  // clip before unscale
  g.unscaled(false);
  EXPECT_EQ(g.loss_scale(), 1.0);
  g.advance(GradStage::unscaled, GradStage::clipped, "clip");
  g.applied();
  EXPECT_EQ(g.stage(), GradStage::applied);
  try {
    g.applied();
    FAIL() << "applied twice";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "gradient stage apply needs a clipped gradient; it is applied");
  }
}

TEST(GradientStages, AnOverflowedGradientCannotBeApplied) {
  GradientBuffer g;
  g.assign(2, 1.0f);
  g.begin_step(65536.0);
  g.advance(GradStage::computed, GradStage::local, "combine");
  g.reduced(2.0);
  g.unscaled(true);  // the scaler skipped the step: the values still carry the scale
  g.advance(GradStage::unscaled, GradStage::clipped, "clip");
  EXPECT_THROW(g.applied(), std::logic_error);
}
