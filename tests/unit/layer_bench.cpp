#include "layer_bench.hpp"

#include <algorithm>

#include "numerics/philox.hpp"

namespace divsim::test {
namespace {

std::vector<float> normal_values(std::size_t n, std::uint32_t what, double scale) {
  const KeyedStream s(20261207, Stream::synthetic, what);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * s.normal(i));
  return v;
}

}  // namespace

LayerBench::LayerBench(const LayerSpec& spec, std::int64_t r, double input_scale) : rows(r), layer_(make_layer(spec)) {
  const auto R = static_cast<std::size_t>(rows);
  std::size_t np = 0, nb = 0;
  for (const ParamSpec& p : layer_->params()) {
    param_offsets_.push_back(np);
    np += static_cast<std::size_t>(numel(p.shape));
  }
  for (const BufferSpec& b : layer_->buffers()) {
    buffer_offsets_.push_back(nb);
    nb += static_cast<std::size_t>(b.size);
  }
  layer_->place(0, param_offsets_, buffer_offsets_);
  params = normal_values(np, 1, 0.5);
  grads.assign(np, 0.0f);
  buffers.resize(nb);
  for (std::size_t i = 0; i < layer_->buffers().size(); ++i)
    std::fill_n(buffers.begin() + static_cast<std::ptrdiff_t>(buffer_offsets_[i]), layer_->buffers()[i].size,
                layer_->buffers()[i].value);
  std::size_t largest = np;
  for (std::size_t i = 0; i < layer_->input_shapes().size(); ++i) {
    x.push_back(normal_values(R * static_cast<std::size_t>(layer_->in_features(i)), 10 + static_cast<std::uint32_t>(i),
                              input_scale));
    dx.emplace_back(x.back().size(), 0.0f);
    largest = std::max(largest, x.back().size());
  }
  y.assign(R * static_cast<std::size_t>(layer_->out_features()), 0.0f);
  dy = normal_values(y.size(), 20, 1.0);
  largest = std::max(largest, y.size());
  for (const MatrixProduct& m : layer_->products())
    largest = std::max(largest, R * static_cast<std::size_t>(m.rows_per_sample * std::max(m.in, m.out)));
  for (const SavedSpec& s : layer_->saved()) saved.emplace_back(static_cast<std::size_t>(s.per_sample * rows + s.per_replica));
  for (std::size_t i = 0; i < R; ++i) samples.push_back(static_cast<std::int64_t>(i));
  for (auto& s : round_scratch_) s.resize(largest);
  work_.resize(static_cast<std::size_t>(layer_->workspace(rows)));
}

void LayerBench::token_ids(std::size_t i, std::int64_t bound) {
  const KeyedStream s(20261207, Stream::synthetic, 30 + static_cast<std::uint32_t>(i));
  for (std::size_t j = 0; j < x[i].size(); ++j)
    x[i][j] = static_cast<float>(
        std::min<std::int64_t>(bound - 1, static_cast<std::int64_t>(s.uniform(j) * static_cast<float>(bound))));
  dx[i].clear();
}

Pass LayerBench::pass() {
  round_ = std::make_unique<OperandRounding>(format, std::array<std::span<float>, 3>{round_scratch_[0], round_scratch_[1],
                                                                                     round_scratch_[2]});
  saved_ptrs_.clear();
  for (auto& s : saved) saved_ptrs_.push_back(s.data());
  Pass p;
  p.rows = rows;
  for (std::size_t i = 0; i < x.size(); ++i) {
    p.x[i] = x[i].data();
    p.dx[i] = dx[i].empty() ? nullptr : dx[i].data();
  }
  p.y = y.data();
  p.dy = dy.data();
  p.saved = saved_ptrs_;
  p.work = work_;
  p.params = params.data();
  p.buffers = buffers.data();
  p.keys = {1, 0, samples.data()};
  p.round = round_.get();
  p.grads = grads.data();
  return p;
}

void LayerBench::forward() {
  const Pass p = pass();
  const StatisticsPhases* st = layer_->statistics();
  if (!st) return layer_->forward(p);
  const std::size_t w = st->forward_width(), phases = static_cast<std::size_t>(st->forward_phases());
  forward_totals.assign(w * phases, 0.0);
  for (std::size_t ph = 0; ph < phases; ++ph)
    st->forward_partial(static_cast<int>(ph), p, std::span<const double>(forward_totals.data(), ph * w),
                        static_cast<double>(rows), std::span<double>(forward_totals.data() + ph * w, w));
  st->forward_finish(p, forward_totals, static_cast<double>(rows));
}

void LayerBench::forward_eval(std::vector<float>& out) {
  Pass p = pass();
  out.assign(y.size(), 0.0f);
  p.y = out.data();
  p.saved = {};
  layer_->forward_eval(p);
}

void LayerBench::backward(GradWrite write) {
  Pass p = pass();
  p.write = write;
  const StatisticsPhases* st = layer_->statistics();
  if (!st) {
    layer_->backward_params(p);
    return layer_->backward_input(p);
  }
  backward_totals.assign(st->backward_width(), 0.0);
  st->backward_partial(p, backward_totals);
  st->backward_finish(p, backward_totals, static_cast<double>(rows));
}

}  // namespace divsim::test
