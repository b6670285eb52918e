#include "train/step_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/gemm_backend.hpp"
#include "model/loss.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

constexpr std::int64_t kEvalBatch = 1000;  // fixed, so eval results do not depend on the world size

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
Eigen::Index ix(std::int64_t v) { return static_cast<Eigen::Index>(v); }

}  // namespace

StepEngine::StepEngine(const Mlp& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings)
    : model_(model), data_(train), reducer_(reducer), s_(settings) {
  use_one_gemm_thread();
  if (s_.chunk <= 0 || s_.plan.micro_batch % s_.chunk != 0)
    throw std::logic_error("chunk must divide the micro-batch");
  chunks_per_micro_ = static_cast<int>(s_.plan.micro_batch / s_.chunk);
  grad_parts_ = s_.deterministic ? chunks_per_micro_ * s_.plan.accum_steps : 1;
  for (std::size_t l = 0; l < model_.layers().size(); ++l) {
    const std::int64_t rows = l < s_.product_rows.size() && s_.product_rows[l] > 0 ? s_.product_rows[l] : s_.chunk;
    if (rows % s_.chunk != 0 || s_.plan.micro_batch % rows != 0)
      throw std::logic_error("product_rows must be a multiple of chunk that divides the micro-batch");
    product_rows_.push_back(rows);
  }
  if (!s_.grad_slot.empty()) {
    bool ok = s_.deterministic && s_.grad_slot.size() == sz(grad_parts_);
    for (std::size_t i = 0; ok && i < s_.grad_slot.size(); ++i) ok = s_.grad_slot[i] >= 0 && sz(s_.grad_slot[i]) <= i;
    if (!ok) throw std::logic_error("grad_slot must map every chunk slot to itself or a lower slot");
  }
  const std::int64_t w = model_.max_width();
  const std::size_t rows = sz(std::max(s_.plan.micro_batch, kEvalBatch));
  round_a_.resize(rows * sz(w));
  round_c_.resize(rows * sz(w));
  std::size_t max_weight = 0;
  for (const Layer& l : model_.layers())
    if (l.kind == LayerKind::linear) max_weight = std::max(max_weight, sz(l.in * l.out));
  round_b_.resize(max_weight);
  eval_a_.resize(sz(kEvalBatch * w));
  eval_b_.resize(sz(kEvalBatch * w));
  eval_labels_.resize(sz(kEvalBatch));
}

void StepEngine::allocate(Replica& r) const {
  const std::size_t mb = sz(s_.plan.micro_batch);
  r.params.assign(model_.num_params(), 0.0f);
  r.grads.assign(model_.num_params() * sz(grad_parts_), 0.0f);
  r.buffers.assign(model_.num_buffers(), 0.0f);
  r.samples.assign(mb, 0);
  r.step_samples.assign(mb * sz(s_.plan.accum_steps), 0);
  r.labels.assign(mb, 0);
  r.input.assign(mb * sz(model_.in_features()), 0.0f);
  const auto& layers = model_.layers();
  r.out.assign(layers.size(), {});
  r.aux.assign(layers.size(), {});
  r.bn_mean.assign(layers.size(), {});
  r.bn_invstd.assign(layers.size(), {});
  for (std::size_t l = 0; l < layers.size(); ++l) {
    r.out[l].assign(mb * sz(layers[l].out), 0.0f);
    if (layers[l].kind == LayerKind::batchnorm || layers[l].kind == LayerKind::dropout)
      r.aux[l].assign(mb * sz(layers[l].out), 0.0f);
    if (layers[l].kind == LayerKind::batchnorm) {
      r.bn_mean[l].assign(sz(layers[l].out), 0.0f);
      r.bn_invstd[l].assign(sz(layers[l].out), 0.0f);
    }
  }
  r.dcur.assign(mb * sz(model_.max_width()), 0.0f);
  r.dnext.assign(mb * sz(model_.max_width()), 0.0f);
  r.loss_parts.assign(sz(grad_parts_), 0.0);
}

ConstMatView StepEngine::matmul_input(const Replica& r, ConstMatView m, std::vector<float>& scratch) const {
  if (r.knobs.matmul == MatmulFormat::fp32) return m;
  const std::size_t n = sz(m.size());
  std::copy_n(m.data(), n, scratch.data());
  round_to_format(std::span<float>(scratch.data(), n), r.knobs.matmul);
  return ConstMatView(scratch.data(), m.rows(), m.cols());
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

const float* StepEngine::layer_input(const Replica& r, std::size_t l) const {
  return l == 0 ? r.input.data() : r.out[l - 1].data();
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
    r.labels[i] = data_.y[sz(s)];
  }
}

void StepEngine::run_micro(std::span<Replica> replicas, std::int64_t step, int micro, LayerStatsBuffer* stats) {
  const auto& layers = model_.layers();
  const std::size_t L = layers.size();
  for (Replica& r : replicas) gather_inputs(r, step);

  for (std::size_t l = 0; l < L; ++l) {
    forward_layer(replicas, l, step);
    if (stats)
      for (std::size_t k = 0; k < replicas.size(); ++k)
        activation_stats(ConstMatView(replicas[k].out[l].data(), ix(s_.plan.micro_batch), ix(layers[l].out)),
                         std::span<double, kStatCount>(stats->forward.data() + (k * L + l) * kStatCount, kStatCount));
  }

  // Loss and dloss/dlogits, chunk by chunk so each chunk's loss is its own partial.
  const Layer& last = layers.back();
  for (Replica& r : replicas) {
    for (int c = 0; c < chunks_per_micro_; ++c) {
      const std::int64_t row0 = c * s_.chunk;
      const ConstMatView logits(r.out.back().data() + sz(row0 * last.out), ix(s_.chunk), ix(last.out));
      const MatView dlogits(r.dcur.data() + sz(row0 * last.out), ix(s_.chunk), ix(last.out));
      const LossSums sums = loss_forward_backward(
          logits, std::span<const std::int32_t>(r.labels.data() + row0, sz(s_.chunk)), r.knobs.loss,
          s_.grad_scale * static_cast<float>(r.loss_scale), dlogits);
      r.loss_parts[s_.deterministic ? sz(micro * chunks_per_micro_ + c) : 0] += sums.loss;
      r.loss_sum += sums.loss;
      r.correct += sums.correct;
    }
  }

  for (std::size_t l = L; l-- > 0;) {
    if (stats)
      for (std::size_t k = 0; k < replicas.size(); ++k)
        activation_stats(ConstMatView(replicas[k].dcur.data(), ix(s_.plan.micro_batch), ix(layers[l].out)),
                         std::span<double, kStatCount>(stats->backward.data() + (k * L + l) * kStatCount, kStatCount));
    backward_layer(replicas, l, micro);
  }
}

void StepEngine::forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step) {
  const Layer& layer = model_.layers()[l];
  const auto mb = ix(s_.plan.micro_batch), in = ix(layer.in), out = ix(layer.out);
  switch (layer.kind) {
    case LayerKind::linear:
      for (Replica& r : replicas) {
        const ConstMatView w = matmul_input(r, ConstMatView(r.params.data() + layer.weight, out, in), round_b_);
        const std::span<const float> b(r.params.data() + layer.bias, sz(layer.out));
        const std::int64_t rows = product_rows_[l];
        for (std::int64_t row0 = 0; row0 < mb; row0 += rows) {
          const ConstMatView x = matmul_input(r, ConstMatView(layer_input(r, l) + sz(row0 * layer.in), ix(rows), in), round_a_);
          linear_forward(x, w, b, MatView(r.out[l].data() + sz(row0 * layer.out), ix(rows), out));
        }
      }
      return;
    case LayerKind::relu:
      for (Replica& r : replicas)
        relu_forward(ConstMatView(layer_input(r, l), mb, in), MatView(r.out[l].data(), mb, out));
      return;
    case LayerKind::dropout: {
      // Inverted dropout; the mask of a sample is keyed by (step, global sample index, layer), never by
      // rank or micro-step, so it does not move when the world size or the accumulation changes.
      const auto keep = static_cast<float>(1.0 - model_.dropout());
      const float scale = 1.0f / keep;
      for (Replica& r : replicas) {
        for (Eigen::Index i = 0; i < mb; ++i) {
          float* mask = r.aux[l].data() + sz(i * out);
          KeyedStream(r.knobs.dropout_seed, Stream::dropout, static_cast<std::uint32_t>(step),
                      static_cast<std::uint32_t>(r.samples[sz(i)]), layer.index)
              .fill_uniform(std::span<float>(mask, sz(out)));
          // Mask and output row while the row is in cache (dropout_apply's product, row by row).
          const float* x = layer_input(r, l) + sz(i * in);
          float* y = r.out[l].data() + sz(i * out);
          for (std::size_t c = 0; c < sz(out); ++c) {
            mask[c] = mask[c] < keep ? scale : 0.0f;
            y[c] = x[c] * mask[c];
          }
        }
      }
      return;
    }
    case LayerKind::batchnorm:
      batchnorm_forward(replicas, layer);
      return;
  }
}

double StepEngine::combine_bn_sums(std::size_t ranks, std::size_t n) {
  const auto chunks = static_cast<std::size_t>(chunks_per_micro_);
  bn_totals_.assign(ranks * n, 0.0);
  if (s_.sync_bn) {
    reducer_.sum_statistics(std::span<const double>(bn_parts_.data(), ranks * chunks * n), chunks_per_micro_,
                            std::span<double>(bn_totals_.data(), n));
    for (std::size_t k = 1; k < ranks; ++k) std::copy_n(bn_totals_.data(), n, bn_totals_.data() + k * n);
    return static_cast<double>(s_.plan.micro_batch * s_.plan.world_size);
  }
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t c = 0; c < chunks; ++c)
      for (std::size_t i = 0; i < n; ++i) bn_totals_[k * n + i] += bn_parts_[(k * chunks + c) * n + i];
  return static_cast<double>(s_.plan.micro_batch);
}

void StepEngine::batchnorm_forward(std::span<Replica> replicas, const Layer& layer) {
  const std::size_t l = layer.index, n = sz(layer.out), chunks = sz(chunks_per_micro_);
  const auto mb = ix(s_.plan.micro_batch), width = ix(layer.out);
  const std::size_t ranks = replicas.size();
  auto chunk_view = [&](const Replica& r, std::size_t c) {
    return ConstMatView(layer_input(r, l) + c * sz(s_.chunk) * n, ix(s_.chunk), width);
  };

  // Two passes (mean, then squared deviations) over partial sums in double: exact enough that the
  // float results match PyTorch's Welford statistics, and reducible across ranks for SyncBatchNorm.
  bn_parts_.assign(ranks * chunks * n, 0.0);
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t c = 0; c < chunks; ++c)
      bn_partial_sum(chunk_view(replicas[k], c), std::span<double>(bn_parts_.data() + (k * chunks + c) * n, n));
  const double count = combine_bn_sums(ranks, n);
  std::vector<double>& mean = bn_means_;
  mean.assign(ranks * n, 0.0);
  for (std::size_t i = 0; i < ranks * n; ++i) mean[i] = bn_totals_[i] / count;

  bn_parts_.assign(ranks * chunks * n, 0.0);
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t c = 0; c < chunks; ++c)
      bn_partial_sqdev(chunk_view(replicas[k], c), std::span<const double>(mean.data() + k * n, n),
                       std::span<double>(bn_parts_.data() + (k * chunks + c) * n, n));
  combine_bn_sums(ranks, n);

  const double m = model_.bn_momentum(), eps = model_.bn_eps();
  for (std::size_t k = 0; k < ranks; ++k) {
    Replica& r = replicas[k];
    float* running_mean = r.buffers.data() + layer.running_mean;
    float* running_var = r.buffers.data() + layer.running_var;
    for (std::size_t i = 0; i < n; ++i) {
      const double var = bn_totals_[k * n + i] / count;
      r.bn_mean[l][i] = static_cast<float>(mean[k * n + i]);
      r.bn_invstd[l][i] = static_cast<float>(1.0 / std::sqrt(var + eps));
      // PyTorch: running stats use the unbiased variance and momentum m.
      running_mean[i] = static_cast<float>((1.0 - m) * running_mean[i] + m * mean[k * n + i]);
      running_var[i] = static_cast<float>((1.0 - m) * running_var[i] + m * var * count / std::max(1.0, count - 1.0));
    }
    const std::span<const float> gamma(r.params.data() + layer.weight, n), beta(r.params.data() + layer.bias, n);
    bn_normalize(ConstMatView(layer_input(r, l), mb, width), r.bn_mean[l], r.bn_invstd[l], gamma, beta,
                 MatView(r.aux[l].data(), mb, width), MatView(r.out[l].data(), mb, width));
  }
}

void StepEngine::backward_layer(std::span<Replica> replicas, std::size_t l, int micro) {
  const Layer& layer = model_.layers()[l];
  const auto mb = ix(s_.plan.micro_batch), in = ix(layer.in), out = ix(layer.out);
  const std::size_t n = model_.num_params();
  switch (layer.kind) {
    case LayerKind::linear:
      for (Replica& r : replicas) {
        const ConstMatView w = matmul_input(r, ConstMatView(r.params.data() + layer.weight, out, in), round_b_);
        for (int c = 0; c < chunks_per_micro_; ++c) {
          const std::int64_t row0 = c * s_.chunk;
          const GradTarget target = grad_target(micro, c);
          float* g = r.grads.data() + target.slot * n;
          const ConstMatView dy = matmul_input(r, ConstMatView(r.dcur.data() + sz(row0 * layer.out), ix(s_.chunk), out), round_c_);
          const ConstMatView x = matmul_input(r, ConstMatView(layer_input(r, l) + sz(row0 * layer.in), ix(s_.chunk), in), round_a_);
          linear_backward(dy, x, w, MatView(g + layer.weight, out, in), std::span<float>(g + layer.bias, sz(layer.out)),
                          MatView(nullptr, 0, in), target.write);
        }
        // The first layer's input gradient is not needed (the input is data).
        const std::int64_t rows = product_rows_[l];
        for (std::int64_t row0 = 0; l > 0 && row0 < mb; row0 += rows) {
          const ConstMatView dy = matmul_input(r, ConstMatView(r.dcur.data() + sz(row0 * layer.out), ix(rows), out), round_c_);
          linear_input_grad(dy, w, MatView(r.dnext.data() + sz(row0 * layer.in), ix(rows), in));
        }
      }
      break;
    case LayerKind::relu:
      for (Replica& r : replicas)
        relu_backward(ConstMatView(r.dcur.data(), mb, out), ConstMatView(r.out[l].data(), mb, out),
                      MatView(r.dnext.data(), mb, in));
      break;
    case LayerKind::dropout:
      for (Replica& r : replicas)
        dropout_apply(ConstMatView(r.dcur.data(), mb, out), ConstMatView(r.aux[l].data(), mb, out),
                      MatView(r.dnext.data(), mb, in));
      break;
    case LayerKind::batchnorm:
      batchnorm_backward(replicas, layer, micro);
      break;
  }
  for (Replica& r : replicas) std::swap(r.dcur, r.dnext);
}

void StepEngine::batchnorm_backward(std::span<Replica> replicas, const Layer& layer, int micro) {
  const std::size_t l = layer.index, n = sz(layer.out), chunks = sz(chunks_per_micro_);
  const std::size_t ranks = replicas.size(), np = model_.num_params();
  const auto mb = ix(s_.plan.micro_batch), width = ix(layer.out);
  // Per chunk: [sum dy | sum dy*xhat]; they are also dbeta and dgamma of that chunk.
  bn_parts_.assign(ranks * chunks * 2 * n, 0.0);
  for (std::size_t k = 0; k < ranks; ++k) {
    Replica& r = replicas[k];
    for (std::size_t c = 0; c < chunks; ++c) {
      double* part = bn_parts_.data() + (k * chunks + c) * 2 * n;
      const std::size_t off = c * sz(s_.chunk) * n;
      bn_backward_sums(ConstMatView(r.dcur.data() + off, ix(s_.chunk), width),
                       ConstMatView(r.aux[l].data() + off, ix(s_.chunk), width), std::span<double>(part, n),
                       std::span<double>(part + n, n));
      const GradTarget target = grad_target(micro, static_cast<int>(c));
      float* dgamma = r.grads.data() + target.slot * np + layer.weight;
      float* dbeta = r.grads.data() + target.slot * np + layer.bias;
      if (target.write == GradWrite::overwrite) {
        std::fill_n(dgamma, n, 0.0f);
        std::fill_n(dbeta, n, 0.0f);
      }
      for (std::size_t i = 0; i < n; ++i) {
        dbeta[i] += static_cast<float>(part[i]);
        dgamma[i] += static_cast<float>(part[n + i]);
      }
    }
  }
  const double count = combine_bn_sums(ranks, 2 * n);
  for (std::size_t k = 0; k < ranks; ++k) {
    Replica& r = replicas[k];
    const double* totals = bn_totals_.data() + k * 2 * n;
    bn_backward_dx(ConstMatView(r.dcur.data(), mb, width), ConstMatView(r.aux[l].data(), mb, width), r.bn_invstd[l],
                   std::span<const float>(r.params.data() + layer.weight, n), std::span<const double>(totals, n),
                   std::span<const double>(totals + n, n), count, MatView(r.dnext.data(), mb, width));
  }
}

EvalResult StepEngine::evaluate(const Replica& r, const Dataset& data) {
  const auto& layers = model_.layers();
  double loss = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < data.n; first += kEvalBatch) {
    const std::int64_t rows = std::min(kEvalBatch, data.n - first);
    std::copy_n(data.row(first), sz(rows * data.dim), eval_a_.data());
    float* cur = eval_a_.data();
    float* next = eval_b_.data();
    for (const Layer& layer : layers) {
      const auto in = ix(layer.in), out = ix(layer.out);
      const ConstMatView x(cur, ix(rows), in);
      MatView y(next, ix(rows), out);
      switch (layer.kind) {
        case LayerKind::linear:
          linear_forward(matmul_input(r, x, round_a_),
                         matmul_input(r, ConstMatView(r.params.data() + layer.weight, out, in), round_b_),
                         std::span<const float>(r.params.data() + layer.bias, sz(layer.out)), y);
          break;
        case LayerKind::batchnorm:
          bn_forward_eval(x, std::span<const float>(r.buffers.data() + layer.running_mean, sz(layer.out)),
                          std::span<const float>(r.buffers.data() + layer.running_var, sz(layer.out)),
                          model_.bn_eps(), std::span<const float>(r.params.data() + layer.weight, sz(layer.out)),
                          std::span<const float>(r.params.data() + layer.bias, sz(layer.out)), y);
          break;
        case LayerKind::relu: relu_forward(x, y); break;
        case LayerKind::dropout: y = x; break;  // identity in eval mode
      }
      std::swap(cur, next);
    }
    const LossSums sums = cross_entropy_eval(ConstMatView(cur, ix(rows), ix(model_.classes())),
                                             std::span<const std::int32_t>(data.y.data() + first, sz(rows)));
    loss += sums.loss;
    correct += sums.correct;
  }
  const auto n = static_cast<double>(data.n);
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace divsim
