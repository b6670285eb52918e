// The conv2d style against torch.nn.Conv2d on a ResNet's three kinds of convolution (the stem, a strided
// block convolution, the 1x1 strided shortcut), and against itself on the engine's contract: a chunk's
// weight gradient written or added, backward on other blocks of rows than forward's.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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
