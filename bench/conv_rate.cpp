// divsim_conv_rate: single-thread times of divsim's conv2d layer style (src/model/layers/conv2d.cpp),
// compiled with divsim's flags, called as the engine calls it (train/step_engine.cpp) on one block of
// B rows: forward; and forward + backward_params (GradWrite::overwrite, the B rows as one chunk) +
// backward_input (input gradient wanted). bench/conv_vs_torch.py sets torch's times beside them.
// Inputs, weights and dy are fixed patterns; no results are checked (the unit tests do that).
//
// usage: divsim_conv_rate B C H W OUT KERNEL STRIDE PADDING [repeats, default 20]
// prints "<forward ms> <forward+backward ms> <backward_params ms> <backward_input ms>": the minimum over
// the repeats of each (after one untimed round that touches every buffer).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "model/gemm_backend.hpp"
#include "model/layer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

long positive(const char* text, const char* what, bool zero_ok = false) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < (zero_ok ? 0 : 1)) {
    std::fprintf(stderr, "divsim_conv_rate: %s must be a %s integer, got '%s'\n", what,
                 zero_ok ? "non-negative" : "positive", text);
    std::exit(2);
  }
  return v;
}

std::vector<float> pattern(std::size_t n, float phase, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
  return v;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9 && argc != 10) {
    std::fprintf(stderr, "usage: divsim_conv_rate B C H W OUT KERNEL STRIDE PADDING [repeats]\n");
    return 2;
  }
  const long b = positive(argv[1], "B"), c = positive(argv[2], "C"), h = positive(argv[3], "H"),
             w = positive(argv[4], "W"), out = positive(argv[5], "OUT"), k = positive(argv[6], "KERNEL"),
             stride = positive(argv[7], "STRIDE"), pad = positive(argv[8], "PADDING", true);
  const long repeats = argc == 10 ? positive(argv[9], "repeats") : 20;
  divsim::use_one_gemm_thread();
  const auto layer = divsim::make_layer({"conv2d", "conv", {{c, h, w}},
                                         {{"out", static_cast<double>(out)}, {"kernel", static_cast<double>(k)},
                                          {"stride", static_cast<double>(stride)}, {"padding", static_cast<double>(pad)},
                                          {"bias", 0}}});
  layer->place(0, {0}, {});
  const auto rows = static_cast<std::size_t>(b);
  const auto in_f = static_cast<std::size_t>(layer->in_features()), out_f = static_cast<std::size_t>(layer->out_features());
  const std::vector<float> params = pattern(static_cast<std::size_t>(out * c * k * k), 0.1f, 0.2f),
                           x = pattern(rows * in_f, 0.2f, 1.0f), dy = pattern(rows * out_f, 0.3f, 1.0f);
  std::vector<float> y(rows * out_f), dx(rows * in_f), grads(params.size());
  std::vector<std::vector<float>> saved;
  std::vector<float*> saved_ptrs;
  for (const divsim::SavedSpec& s : layer->saved()) {
    saved.emplace_back(rows * static_cast<std::size_t>(s.per_sample) + static_cast<std::size_t>(s.per_replica));
    saved_ptrs.push_back(saved.back().data());
  }
  std::vector<float> work(static_cast<std::size_t>(layer->workspace(b)));
  const divsim::OperandRounding round(divsim::MatmulFormat::fp32, {});
  divsim::Pass p;
  p.rows = b;
  p.x[0] = x.data();
  p.y = y.data();
  p.saved = saved_ptrs;
  p.work = work;
  p.params = params.data();
  p.round = &round;
  p.dy = dy.data();
  p.dx[0] = dx.data();
  p.grads = grads.data();
  p.write = divsim::GradWrite::overwrite;

  double fwd = std::numeric_limits<double>::infinity(), step = fwd, params_ms = fwd, input_ms = fwd;
  for (long r = -1; r < repeats; ++r) {
    auto t0 = Clock::now();
    layer->forward(p);
    const double f = ms_since(t0);
    t0 = Clock::now();
    layer->forward(p);
    const auto t1 = Clock::now();
    layer->backward_params(p);
    const auto t2 = Clock::now();
    layer->backward_input(p);
    const double s = ms_since(t0);
    if (r >= 0) {
      fwd = std::min(fwd, f);
      step = std::min(step, s);
      params_ms = std::min(params_ms, std::chrono::duration<double, std::milli>(t2 - t1).count());
      input_ms = std::min(input_ms, ms_since(t2));
    }
  }
  double check = 0.0;
  for (float v : y) check += v;
  for (float v : dx) check += v;
  for (float v : grads) check += v;
  std::fprintf(stderr, "checksum %g\n", check);
  std::printf("%.3f %.3f %.3f %.3f\n", fwd, step, params_ms, input_ms);
  return 0;
}
