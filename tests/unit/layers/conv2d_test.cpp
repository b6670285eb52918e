// The conv2d style against torch.nn.Conv2d on a ResNet's three kinds of convolution (the stem, a strided
// block convolution, the 1x1 strided shortcut), and against itself on the engine's contract: a chunk's
// weight gradient written or added, backward on other blocks of rows than forward's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "layer_bench.hpp"
#include "torch_peer.hpp"

using namespace divsim;
using namespace divsim::test;

TEST(LayerStyle, Conv2dMatchesTorch) {
  std::string skipped;
  // One sample: the harness hands torch its script on a command line, which Linux caps at 128 KiB per
  // argument, and the stem's input and dy in hex take about 63 KB a sample.
  const TorchLayerCase stem(
      {"conv2d", "stem", {{1, 28, 28}}, {{"out", 4}, {"kernel", 3}, {"stride", 1}, {"padding", 1}}}, 1,
      "m = torch.nn.Conv2d(1, 4, 3, stride=1, padding=1)");
  if (!check_layer_against_torch(stem, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase strided(
      {"conv2d", "block", {{3, 9, 9}}, {{"out", 5}, {"kernel", 3}, {"stride", 2}, {"padding", 1}, {"bias", 0}}}, 4,
      "m = torch.nn.Conv2d(3, 5, 3, stride=2, padding=1, bias=False)");
  if (!check_layer_against_torch(strided, skipped)) GTEST_SKIP() << skipped;
  const TorchLayerCase shortcut(
      {"conv2d", "shortcut", {{4, 8, 8}}, {{"out", 6}, {"kernel", 1}, {"stride", 2}, {"bias", 0}}}, 3,
      "m = torch.nn.Conv2d(4, 6, 1, stride=2, padding=0, bias=False)");
  if (!check_layer_against_torch(shortcut, skipped)) GTEST_SKIP() << skipped;
}

namespace {

std::vector<float> pattern(std::size_t n, float phase) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.7f * static_cast<float>(i) + phase);
  return v;
}

// The max |a - b| over all elements.
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST(LayerStyle, Conv2dChunksAndBlocks) {
  const auto layer =
      make_layer({"conv2d", "c", {{3, 7, 7}}, {{"out", 5}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}});
  layer->place(0, {0, 5 * 3 * 3 * 3}, {});
  constexpr std::int64_t kRows = 4;
  const auto in = static_cast<std::size_t>(layer->in_features()), out = static_cast<std::size_t>(layer->out_features());
  const std::vector<float> params = pattern(5 * 27 + 5, 0.1f), x = pattern(kRows * in, 0.2f),
                           dy = pattern(kRows * out, 0.3f);
  std::vector<std::vector<float>> saved;
  for (const SavedSpec& s : layer->saved()) saved.emplace_back(static_cast<std::size_t>(s.per_sample * kRows));
  const OperandRounding round(MatmulFormat::fp32, {});
  std::vector<float> y(kRows * out), work(static_cast<std::size_t>(layer->workspace(kRows)));

  // The pass over rows [first, first + rows): per-row pointers at its first row.
  const auto pass = [&](std::int64_t first, std::int64_t rows, std::vector<float*>& saved_at) {
    saved_at.clear();
    for (std::size_t i = 0; i < saved.size(); ++i)
      saved_at.push_back(saved[i].data() + first * layer->saved()[i].per_sample);
    Pass p;
    p.rows = rows;
    p.x[0] = x.data() + first * static_cast<std::int64_t>(in);
    p.y = y.data() + first * static_cast<std::int64_t>(out);
    p.saved = saved_at;
    p.work = work;
    p.params = params.data();
    p.round = &round;
    p.dy = dy.data() + first * static_cast<std::int64_t>(out);
    return p;
  };
  std::vector<float*> at;
  layer->forward(pass(0, kRows, at));

  // Whole block, overwriting; then accumulating onto zeros, which must give the same bits.
  std::vector<float> whole(params.size(), 7.0f), onto_zeros(params.size(), 0.0f), chunked(params.size(), 7.0f);
  Pass p = pass(0, kRows, at);
  p.grads = whole.data();
  p.write = GradWrite::overwrite;
  layer->backward_params(p);
  p.grads = onto_zeros.data();
  p.write = GradWrite::accumulate;
  layer->backward_params(p);
  EXPECT_EQ(whole, onto_zeros);
  // Two chunks, the first written, the second added: the same sums in another order.
  Pass c0 = pass(0, 2, at);
  c0.grads = chunked.data();
  c0.write = GradWrite::overwrite;
  layer->backward_params(c0);
  std::vector<float*> at1;
  Pass c1 = pass(2, 2, at1);
  c1.grads = chunked.data();
  c1.write = GradWrite::accumulate;
  layer->backward_params(c1);
  EXPECT_LT(max_diff(whole, chunked), 1e-5f);

  // Input gradient of the whole block, and of rows [1, 3) alone into a buffer full of NaN (overwritten).
  std::vector<float> dx_whole(kRows * in), dx_block(kRows * in, std::nanf(""));
  Pass b = pass(0, kRows, at);
  b.dx[0] = dx_whole.data();
  layer->backward_input(b);
  Pass b1 = pass(1, 2, at);
  b1.dx[0] = dx_block.data() + in;
  layer->backward_input(b1);
  for (std::size_t i = in; i < 3 * in; ++i) EXPECT_NEAR(dx_block[i], dx_whole[i], 1e-5f) << i;
}

namespace {

// The convolution, its input gradient and weight gradient as direct sums in double, over `rows` samples.
struct DirectConv {
  std::int64_t C, H, W, K, k, s, pad, OH, OW;
  double x(const std::vector<float>& in, std::int64_t n, std::int64_t c, std::int64_t ih, std::int64_t iw) const {
    return ih < 0 || ih >= H || iw < 0 || iw >= W ? 0.0 : in[static_cast<std::size_t>(((n * C + c) * H + ih) * W + iw)];
  }
};

}  // namespace

// Shapes the torch cases do not reach: channel-vectorised products (K or C a multiple of 32 on small
// outputs), padding as wide as the kernel, stride above the kernel; and a sample's forward output and
// input gradient bits the same whatever rows share its block.
TEST(LayerStyle, Conv2dMatchesDirectSums) {
  const std::vector<std::array<std::int64_t, 7>> shapes = {
      // C, H, W, K, kernel, stride, padding
      {32, 5, 5, 32, 3, 1, 1}, {32, 6, 6, 64, 3, 2, 1}, {3, 7, 7, 32, 1, 2, 0}, {64, 4, 4, 16, 3, 1, 1},
      {2, 5, 6, 3, 3, 1, 2},   {2, 4, 5, 3, 2, 3, 3},   {16, 9, 9, 32, 3, 1, 1}, {5, 8, 7, 4, 5, 2, 2},
  };
  constexpr std::int64_t kRows = 3;
  for (const auto& [C, H, W, K, k, s, pad] : shapes) {
    const LayerSpec spec{"conv2d", "c", {{C, H, W}},
                         {{"out", static_cast<double>(K)}, {"kernel", static_cast<double>(k)},
                          {"stride", static_cast<double>(s)}, {"padding", static_cast<double>(pad)}}};
    test::LayerBench b(spec, kRows);
    b.forward();
    std::fill(b.grads.begin(), b.grads.end(), 0.0f);
    b.backward(GradWrite::overwrite);
    const DirectConv d{C, H, W, K, k, s, pad, (H + 2 * pad - k) / s + 1, (W + 2 * pad - k) / s + 1};
    const std::string what = "C" + std::to_string(C) + " " + std::to_string(H) + "x" + std::to_string(W) + " K" +
                             std::to_string(K) + " k" + std::to_string(k) + " s" + std::to_string(s) + " p" + std::to_string(pad);
    const float* w = b.params.data();
    const float* bias = b.params.data() + K * C * k * k;
    std::vector<double> dx(b.dx[0].size(), 0.0), dw(static_cast<std::size_t>(K * C * k * k), 0.0);
    double err_y = 0, err_dx = 0, err_dw = 0;
    for (std::int64_t n = 0; n < kRows; ++n)
      for (std::int64_t o = 0; o < K; ++o)
        for (std::int64_t oh = 0; oh < d.OH; ++oh)
          for (std::int64_t ow = 0; ow < d.OW; ++ow) {
            const auto at = static_cast<std::size_t>(((n * K + o) * d.OH + oh) * d.OW + ow);
            double y = bias[o];
            for (std::int64_t c = 0; c < C; ++c)
              for (std::int64_t kh = 0; kh < k; ++kh)
                for (std::int64_t kw = 0; kw < k; ++kw) {
                  const std::int64_t ih = oh * s - pad + kh, iw = ow * s - pad + kw;
                  const auto wi = static_cast<std::size_t>(((o * C + c) * k + kh) * k + kw);
                  y += w[wi] * d.x(b.x[0], n, c, ih, iw);
                  dw[wi] += b.dy[at] * d.x(b.x[0], n, c, ih, iw);
                  if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    dx[static_cast<std::size_t>(((n * C + c) * H + ih) * W + iw)] += b.dy[at] * w[wi];
                }
            err_y = std::max(err_y, std::abs(y - b.y[at]));
          }
    for (std::size_t i = 0; i < dx.size(); ++i) err_dx = std::max(err_dx, std::abs(dx[i] - b.dx[0][i]));
    for (std::size_t i = 0; i < dw.size(); ++i) err_dw = std::max(err_dw, std::abs(dw[i] - b.grads[i]));
    EXPECT_LT(err_y, 1e-4) << what;
    EXPECT_LT(err_dx, 1e-4) << what;
    EXPECT_LT(err_dw, 1e-3) << what;

    // The middle sample alone: the same bits of y and dx as in the block of three.
    test::LayerBench one(spec, 1);
    one.params = b.params;
    const auto in = static_cast<std::ptrdiff_t>(b.x[0].size() / kRows), out = static_cast<std::ptrdiff_t>(b.y.size() / kRows);
    std::copy(b.x[0].begin() + in, b.x[0].begin() + 2 * in, one.x[0].begin());
    std::copy(b.dy.begin() + out, b.dy.begin() + 2 * out, one.dy.begin());
    one.forward();
    one.backward(GradWrite::overwrite);
    EXPECT_TRUE(std::equal(one.y.begin(), one.y.end(), b.y.begin() + out)) << what << ": y depends on the block";
    EXPECT_TRUE(std::equal(one.dx[0].begin(), one.dx[0].end(), b.dx[0].begin() + in)) << what << ": dx depends on the block";
  }
}
