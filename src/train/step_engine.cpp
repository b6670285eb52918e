#include "train/step_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/activation_stats.hpp"
#include "model/gemm_backend.hpp"
#include "model/loss.hpp"

namespace divsim {
namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
Eigen::Index ix(std::int64_t v) { return static_cast<Eigen::Index>(v); }

}  // namespace

StepEngine::StepEngine(const Model& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings)
    : model_(model),
      data_(train),
      reducer_(reducer),
      s_(settings),
      round_(MatmulFormat::fp32, {}) {
  use_one_gemm_thread();
  if (s_.chunk <= 0 || s_.plan.micro_batch % s_.chunk != 0)
    throw std::logic_error("chunk must divide the micro-batch");
  chunks_per_micro_ = static_cast<int>(s_.plan.micro_batch / s_.chunk);
  grad_parts_ = s_.deterministic ? chunks_per_micro_ * s_.plan.accum_steps : 1;
  const std::int64_t mb = s_.plan.micro_batch;
  // Layers with matrix products take product_rows (chunk unless the planner found the whole micro-batch
  // gives a row its chunk's bits); elementwise layers the whole micro-batch.
  for (std::size_t l = 0; l < model_.size(); ++l) {
    std::int64_t rows = mb;
    if (!model_.layer(l).products().empty()) {
      rows = l < s_.product_rows.size() && s_.product_rows[l] > 0 ? s_.product_rows[l] : s_.chunk;
      if (rows % s_.chunk != 0 || mb % rows != 0)
        throw std::logic_error("product_rows must be a multiple of chunk that divides the micro-batch");
    }
    block_rows_.push_back(rows);
  }
  if (!s_.grad_slot.empty()) {
    bool ok = s_.deterministic && s_.grad_slot.size() == sz(grad_parts_);
    for (std::size_t i = 0; ok && i < s_.grad_slot.size(); ++i) ok = s_.grad_slot[i] >= 0 && sz(s_.grad_slot[i]) <= i;
    if (!ok) throw std::logic_error("grad_slot must map every chunk slot to itself or a lower slot");
  }
  // Backward visits layers bottom to top: the first to reach an activation writes its gradient, later
  // readers' gradients are added onto it.
  std::vector<bool> written(model_.activations().size(), false);
  adds_grad_.assign(model_.size(), {false, false});
  for (std::size_t l = model_.size(); l-- > 0;)
    for (std::size_t i = 0; i < model_.nodes()[l].inputs.size(); ++i) {
      const auto a = sz(model_.nodes()[l].inputs[i]);
      adds_grad_[l][i] = written[a];
      written[a] = true;
    }

  std::int64_t features = 0, weights = 0;
  for (std::size_t a = 0; a < model_.activations().size(); ++a) features = std::max(features, model_.features(static_cast<int>(a)));
  for (std::size_t l = 0; l < model_.size(); ++l)
    for (const MatrixProduct& m : model_.layer(l).products())
      features = std::max(features, m.rows_per_sample * std::max(m.in, m.out));
  for (const ParamTensor& t : model_.tensors()) weights = std::max(weights, static_cast<std::int64_t>(t.size));
  const std::int64_t eval_rows = model_.eval_batch();
  // Each role holds any operand a layer may hand it: an activation of a call's rows, a product's operand, a
  // parameter tensor (attention rounds per-head activations in the weight role).
  const auto operand = sz(std::max(std::max(mb, eval_rows) * features, weights));
  round_a_.resize(operand);
  round_b_.resize(operand);
  round_c_.resize(operand);
  grad_scratch_.resize(2 * sz(mb * features));
  std::int64_t work = 0;
  for (std::size_t l = 0; l < model_.size(); ++l) work = std::max(work, model_.layer(l).workspace(std::max(mb, eval_rows)));
  work_.resize(sz(work));
  for (std::size_t a = 0; a < model_.activations().size(); ++a)
    eval_act_.emplace_back(sz(eval_rows * model_.features(static_cast<int>(a))));
}

void StepEngine::allocate(Replica& r) const {
  const std::size_t mb = sz(s_.plan.micro_batch);
  r.params.assign(model_.num_params(), 0.0f);
  r.grads.assign(model_.num_params() * sz(grad_parts_), 0.0f);
  r.buffers.assign(model_.num_buffers(), 0.0f);
  r.samples.assign(mb, 0);
  r.step_samples.assign(mb * sz(s_.plan.accum_steps), 0);
  r.labels.assign(mb * sz(data_.targets), 0);
  r.input.assign(mb * sz(model_.in_features()), 0.0f);
  const std::size_t A = model_.activations().size();
  r.act.assign(A, {});
  r.act_grad.assign(A, {});
  for (std::size_t a = 1; a < A; ++a) {
    r.act[a].assign(mb * sz(model_.features(static_cast<int>(a))), 0.0f);
    r.act_grad[a].assign(r.act[a].size(), 0.0f);
  }
  r.saved.assign(model_.size(), {});
  for (std::size_t l = 0; l < model_.size(); ++l)
    for (const SavedSpec& s : model_.layer(l).saved())
      r.saved[l].emplace_back(mb * sz(s.per_sample) + sz(s.per_replica), 0.0f);
  r.loss_parts.assign(sz(grad_parts_), 0.0);
}

// Every gradient slot is written first by a step's first micro-batch (deterministic mode: by its own
// chunk), which overwrites it; later micro-batches add to slot 0, a chunk paired with its tree sibling
// adds to the sibling's slot.
StepEngine::GradTarget StepEngine::grad_target(int micro, int chunk) const {
  if (!s_.deterministic) return {0, micro == 0 ? GradWrite::overwrite : GradWrite::accumulate};
  const auto own = sz(micro * chunks_per_micro_ + chunk);
  const std::size_t slot = s_.grad_slot.empty() ? own : sz(s_.grad_slot[own]);
  return {slot, slot == own ? GradWrite::overwrite : GradWrite::accumulate};
}

const float* StepEngine::activation(const Replica& r, int a) const {
  return a == 0 ? r.input.data() : r.act[sz(a)].data();
}

float* StepEngine::input_grad(Replica& r, std::size_t l, std::size_t i, std::int64_t row0) {
  const int a = model_.nodes()[l].inputs[i];
  if (a == 0) return nullptr;  // the input is data
  const std::size_t off = sz(row0 * model_.features(a));
  if (adds_grad_[l][i]) return grad_scratch_.data() + i * (grad_scratch_.size() / 2) + off;
  return r.act_grad[sz(a)].data() + off;
}

void StepEngine::add_input_grads(Replica& r, std::size_t l) {
  const Node& node = model_.nodes()[l];
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    if (!adds_grad_[l][i]) continue;
    std::vector<float>& g = r.act_grad[sz(node.inputs[i])];
    const float* add = grad_scratch_.data() + i * (grad_scratch_.size() / 2);
    for (std::size_t k = 0; k < g.size(); ++k) g[k] += add[k];
  }
}

Pass StepEngine::pass(Replica& r, std::size_t l, std::int64_t row0, std::int64_t rows, std::int64_t step) {
  const Node& node = model_.nodes()[l];
  Pass p;
  p.rows = rows;
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    p.x[i] = activation(r, node.inputs[i]) + sz(row0 * model_.features(node.inputs[i]));
    p.dx[i] = input_grad(r, l, i, row0);
  }
  const std::size_t out = sz(row0 * model_.features(node.output));
  p.y = r.act[sz(node.output)].data() + out;
  p.dy = r.act_grad[sz(node.output)].data() + out;
  saved_ptrs_.clear();
  const auto& saved = node.layer->saved();
  for (std::size_t j = 0; j < saved.size(); ++j) saved_ptrs_.push_back(r.saved[l][j].data() + sz(row0 * saved[j].per_sample));
  p.saved = saved_ptrs_;
  p.work = work_;
  p.params = r.params.data();
  p.buffers = r.buffers.data();
  p.keys = {r.knobs.dropout_seed, step, r.samples.data() + row0};
  round_ = OperandRounding(r.knobs.matmul, {round_a_, round_b_, round_c_});
  p.round = &round_;
  return p;
}

void StepEngine::gather_inputs(Replica& r, std::int64_t step) const {
  const std::int64_t d = data_.dim;
  for (std::size_t i = 0; i < r.samples.size(); ++i) {
    const std::int64_t s = r.samples[i];
    float* dst = r.input.data() + sz(static_cast<std::int64_t>(i) * d);
    if (s_.augment)
      augment_image(data_.row(s), dst, data_, r.knobs.augment_seed, step, s);
    else
      std::copy_n(data_.row(s), sz(d), dst);
    std::copy_n(data_.targets_of(s), data_.targets, r.labels.data() + static_cast<std::int64_t>(i) * data_.targets);
  }
}

void StepEngine::run_micro(std::span<Replica> replicas, std::int64_t step, int micro, float grad_scale,
                           LayerStatsBuffer* stats) {
  const std::size_t L = model_.size();
  const auto mb = ix(s_.plan.micro_batch);
  for (Replica& r : replicas) gather_inputs(r, step);

  for (std::size_t l = 0; l < L; ++l) {
    forward_layer(replicas, l, step);
    if (stats) {
      const int out = model_.nodes()[l].output;
      for (std::size_t k = 0; k < replicas.size(); ++k)
        activation_stats(ConstMatView(replicas[k].act[sz(out)].data(), mb, ix(model_.features(out))),
                         std::span<double, kStatCount>(stats->forward.data() + (k * L + l) * kStatCount, kStatCount));
    }
  }

  // Loss and dloss/dlogits, chunk by chunk so each chunk's loss is its own partial; a sample has
  // data_.targets rows of logits (one per sequence position for a sequence model).
  const auto logits = sz(model_.logits());
  const std::int64_t classes = model_.classes(), T = data_.targets;
  for (Replica& r : replicas) {
    for (int c = 0; c < chunks_per_micro_; ++c) {
      const std::int64_t row0 = c * s_.chunk * T;
      const LossSums sums = loss_forward_backward(
          ConstMatView(r.act[logits].data() + sz(row0 * classes), ix(s_.chunk * T), ix(classes)),
          std::span<const std::int32_t>(r.labels.data() + row0, sz(s_.chunk * T)), r.knobs.loss,
          grad_scale * static_cast<float>(r.loss_scale),
          MatView(r.act_grad[logits].data() + sz(row0 * classes), ix(s_.chunk * T), ix(classes)));
      r.loss_parts[s_.deterministic ? sz(micro * chunks_per_micro_ + c) : 0] += sums.loss;
      r.loss_sum += sums.loss;
      r.correct += sums.correct;
    }
  }

  for (std::size_t l = L; l-- > 0;) {
    if (stats) {
      const int out = model_.nodes()[l].output;
      for (std::size_t k = 0; k < replicas.size(); ++k)
        activation_stats(ConstMatView(replicas[k].act_grad[sz(out)].data(), mb, ix(model_.features(out))),
                         std::span<double, kStatCount>(stats->backward.data() + (k * L + l) * kStatCount, kStatCount));
    }
    backward_layer(replicas, l, micro);
  }
}

void StepEngine::forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step) {
  const Layer& layer = model_.layer(l);
  if (layer.statistics()) return statistics_forward(replicas, l, step);
  const std::int64_t rows = block_rows_[l];
  for (Replica& r : replicas)
    for (std::int64_t row0 = 0; row0 < s_.plan.micro_batch; row0 += rows) layer.forward(pass(r, l, row0, rows, step));
}

void StepEngine::backward_layer(std::span<Replica> replicas, std::size_t l, int micro) {
  const Layer& layer = model_.layer(l);
  if (layer.statistics()) return statistics_backward(replicas, l, micro);
  const std::size_t np = model_.num_params();
  const std::int64_t rows = block_rows_[l];
  for (Replica& r : replicas) {
    if (!layer.params().empty())
      for (int c = 0; c < chunks_per_micro_; ++c) {
        Pass p = pass(r, l, c * s_.chunk, s_.chunk, 0);
        const GradTarget target = grad_target(micro, c);
        p.grads = r.grads.data() + target.slot * np;
        p.write = target.write;
        layer.backward_params(p);
      }
    for (std::int64_t row0 = 0; row0 < s_.plan.micro_batch; row0 += rows) layer.backward_input(pass(r, l, row0, rows, 0));
    add_input_grads(r, l);
  }
}

double StepEngine::combine_statistics(std::size_t ranks, std::size_t n, double* totals, std::size_t stride) {
  const auto chunks = sz(chunks_per_micro_);
  for (std::size_t k = 0; k < ranks; ++k) std::fill_n(totals + k * stride, n, 0.0);
  if (s_.sync_bn) {
    reducer_.sum_statistics(std::span<const double>(stat_parts_.data(), ranks * chunks * n), chunks_per_micro_,
                            std::span<double>(totals, n));
    for (std::size_t k = 1; k < ranks; ++k) std::copy_n(totals, n, totals + k * stride);
    return static_cast<double>(s_.plan.micro_batch * s_.plan.world_size);
  }
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t c = 0; c < chunks; ++c)
      for (std::size_t i = 0; i < n; ++i) totals[k * stride + i] += stat_parts_[(k * chunks + c) * n + i];
  return static_cast<double>(s_.plan.micro_batch);
}

void StepEngine::statistics_forward(std::span<Replica> replicas, std::size_t l, std::int64_t step) {
  const StatisticsPhases& st = *model_.layer(l).statistics();
  const std::size_t w = st.forward_width(), phases = sz(st.forward_phases()), ranks = replicas.size();
  const std::size_t chunks = sz(chunks_per_micro_), stride = phases * w;
  const double rows = static_cast<double>(s_.sync_bn ? s_.plan.micro_batch * s_.plan.world_size : s_.plan.micro_batch);
  stat_totals_.assign(ranks * stride, 0.0);
  for (std::size_t ph = 0; ph < phases; ++ph) {
    stat_parts_.assign(ranks * chunks * w, 0.0);
    for (std::size_t k = 0; k < ranks; ++k)
      for (std::size_t c = 0; c < chunks; ++c)
        st.forward_partial(static_cast<int>(ph), pass(replicas[k], l, static_cast<std::int64_t>(c) * s_.chunk, s_.chunk, step),
                           std::span<const double>(stat_totals_.data() + k * stride, ph * w), rows,
                           std::span<double>(stat_parts_.data() + (k * chunks + c) * w, w));
    combine_statistics(ranks, w, stat_totals_.data() + ph * w, stride);
  }
  for (std::size_t k = 0; k < ranks; ++k)
    st.forward_finish(pass(replicas[k], l, 0, s_.plan.micro_batch, step),
                      std::span<const double>(stat_totals_.data() + k * stride, stride), rows);
}

void StepEngine::statistics_backward(std::span<Replica> replicas, std::size_t l, int micro) {
  const StatisticsPhases& st = *model_.layer(l).statistics();
  const std::size_t w = st.backward_width(), ranks = replicas.size(), chunks = sz(chunks_per_micro_);
  const std::size_t np = model_.num_params();
  stat_parts_.assign(ranks * chunks * w, 0.0);
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t c = 0; c < chunks; ++c) {
      Pass p = pass(replicas[k], l, static_cast<std::int64_t>(c) * s_.chunk, s_.chunk, 0);
      const GradTarget target = grad_target(micro, static_cast<int>(c));
      p.grads = replicas[k].grads.data() + target.slot * np;
      p.write = target.write;
      st.backward_partial(p, std::span<double>(stat_parts_.data() + (k * chunks + c) * w, w));
    }
  stat_totals_.assign(ranks * w, 0.0);
  const double rows = combine_statistics(ranks, w, stat_totals_.data(), w);
  for (std::size_t k = 0; k < ranks; ++k) {
    st.backward_finish(pass(replicas[k], l, 0, s_.plan.micro_batch, 0),
                       std::span<const double>(stat_totals_.data() + k * w, w), rows);
    add_input_grads(replicas[k], l);
  }
}

EvalResult StepEngine::evaluate(const Replica& r, const Dataset& data) {
  const std::int64_t batch = model_.eval_batch();
  double loss = 0.0;
  std::int64_t correct = 0, counted = 0;
  round_ = OperandRounding(r.knobs.matmul, {round_a_, round_b_, round_c_});
  for (std::int64_t first = 0; first < data.n; first += batch) {
    const std::int64_t rows = std::min(batch, data.n - first);
    std::copy_n(data.row(first), sz(rows * data.dim), eval_act_[0].data());
    for (const Node& node : model_.nodes()) {
      Pass p;
      p.rows = rows;
      for (std::size_t i = 0; i < node.inputs.size(); ++i) p.x[i] = eval_act_[sz(node.inputs[i])].data();
      p.y = eval_act_[sz(node.output)].data();
      p.work = work_;
      p.params = r.params.data();
      // Eval mode reads the running statistics and never writes them.
      p.buffers = const_cast<float*>(r.buffers.data());
      p.round = &round_;
      node.layer->forward_eval(p);
    }
    const LossSums sums =
        cross_entropy_eval(ConstMatView(eval_act_[sz(model_.logits())].data(), ix(rows * data.targets), ix(model_.classes())),
                           std::span<const std::int32_t>(data.targets_of(first), sz(rows * data.targets)));
    loss += sums.loss;
    correct += sums.correct;
    counted += sums.counted;
  }
  const auto n = static_cast<double>(counted);
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace divsim
