// The GPU engine (run.device=cuda): train/step_engine.cpp's micro-step on this process's GPU, layer by
// layer in lockstep over the process's logical ranks, so SyncBatchNorm reduces its statistics through
// the same Reducer between the phases of a layer.
//
// What lives where: parameters, gradients, BatchNorm running statistics and losses stay owned by the
// host Replica, as the step loop, the optimizers and the faults expect. Per micro-step the engine copies
// in the gathered batch (gathered and augmented on the host, as the CPU does), the gradient so far and,
// at the step's first micro-step, the parameters; it copies the gradient back at the end. BatchNorm's
// per-feature sums come to the host, are combined (and reduced, with sync_bn) exactly as the CPU engine
// does, and the host updates the running statistics. Layer statistics for /layers are computed on a host
// copy of the activation by the CPU's own function.
//
// Precision (Replica::knobs.matmul): fp32 runs cuBLAS in CUBLAS_COMPUTE_32F_PEDANTIC; tf32 in
// CUBLAS_COMPUTE_32F_FAST_TF32, the tensor cores' real TF32 (the CPU only emulates it by rounding the
// inputs); bf16/fp16 round the GEMM inputs on the device exactly as the CPU emulation does, then run
// the pedantic FP32 GEMM.
//
// Models: the kernels cover the mlp's layer styles (linear, batchnorm1d, relu, dropout) in a chain; the
// graph is read once into GpuLayer rows. Other models are a ConfigError naming the layer.
// Not supported: dist.reduce=deterministic (its fixed chunk partials are a CPU design; ConfigError).
// Not here: several GPUs per process, CUDA graphs, overlapping transfers with compute.
#include "gpu_engine.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <cmath>
#include <stdexcept>

#include "config/config_error.hpp"
#include "cuda_util.hpp"
#include "layers_gpu.hpp"
#include "loss_gpu.hpp"
#include "model/activation_stats.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

constexpr std::int64_t kEvalBatch = 1000;  // as the CPU engine: eval results do not depend on the world size

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }
int i32(std::int64_t v) { return static_cast<int>(v); }

enum class GpuKind { linear, batchnorm, relu, dropout };

// One layer of the chain as the kernels need it: sizes, offsets of its tensors, its settings.
struct GpuLayer {
  GpuKind kind;
  std::string name;
  std::int64_t in = 0, out = 0;
  std::size_t weight = 0, bias = 0, running_mean = 0, running_var = 0;
  std::uint32_t index = 0;
  double drop = 0.0, momentum = 0.0, eps = 0.0;
};

std::vector<GpuLayer> gpu_layers(const Model& model) {
  static const std::map<std::string, GpuKind> kinds = {{"linear", GpuKind::linear}, {"batchnorm1d", GpuKind::batchnorm},
                                                       {"relu", GpuKind::relu}, {"dropout", GpuKind::dropout}};
  std::vector<GpuLayer> layers;
  for (std::size_t l = 0; l < model.size(); ++l) {
    const Layer& x = model.layer(l);
    const auto kind = kinds.find(x.style());
    if (kind == kinds.end() || model.nodes()[l].inputs != std::vector<int>{static_cast<int>(l)})
      throw ConfigError("run.device", "the CUDA kernels run model.type=mlp only; layer " + x.name() + " (" + x.style() +
                                          ") needs run.device=cpu");
    GpuLayer g{kind->second, x.name(), x.in_features(), x.out_features()};
    g.index = x.index();
    if (!x.params().empty()) {
      g.weight = x.param(0);
      g.bias = x.param(1);
    }
    if (!x.buffers().empty()) {
      g.running_mean = x.buffer(0);
      g.running_var = x.buffer(1);
    }
    g.drop = x.option("p", 0.0);
    g.momentum = x.option("momentum", 0.1);
    g.eps = x.option("eps", 1e-5);
    layers.push_back(g);
  }
  return layers;
}

// One replica's device memory.
struct DeviceReplica {
  int rank = -1;
  gpu::DeviceBuffer<float> params, grads, input, dcur, dnext;
  std::vector<gpu::DeviceBuffer<float>> out, aux, bn_mean, bn_invstd;  // per layer, as in Replica
  gpu::DeviceBuffer<std::int32_t> labels, correct;
  gpu::DeviceBuffer<std::int64_t> samples;
  gpu::DeviceBuffer<double> terms;  // loss terms of the micro-batch (loss_gpu.hpp)
  // Host staging: an activation or gradient for layer statistics; BatchNorm's batch statistics per layer.
  std::vector<float> host;
  std::vector<std::vector<float>> host_bn_mean, host_bn_invstd;
};

class GpuEngine final : public Engine {
 public:
  GpuEngine(const Model& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings);

  int grad_parts() const override { return 1; }
  void allocate(Replica& r) const override;
  void run_micro(std::span<Replica> replicas, std::int64_t step, int micro, float grad_scale,
                 LayerStatsBuffer* stats) override;
  EvalResult evaluate(const Replica& r, const Dataset& data) override;

 private:
  DeviceReplica& device_replica(std::size_t k, const Replica& r);
  void upload_inputs(Replica& r, DeviceReplica& d, std::int64_t step, int micro);
  void forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step);
  void batchnorm_forward(std::span<Replica> replicas, const GpuLayer& layer);
  void loss(Replica& r, DeviceReplica& d, float grad_scale);
  void backward_layer(std::span<Replica> replicas, std::size_t l);
  void batchnorm_backward(std::span<Replica> replicas, const GpuLayer& layer);
  // Per-rank totals [ranks][n] of the per-rank sums in bn_parts_: over all logical ranks (sync_bn) or
  // each rank's own. Returns the row count they cover.
  double combine_bn_sums(std::size_t ranks, std::size_t n);
  // activation_stats of a device activation [micro_batch, cols], through the host buffer `host`.
  void host_stats(const gpu::DeviceBuffer<float>& device, std::int64_t cols, std::vector<float>& host, double* out);
  gpu::Blas blas(MatmulFormat f) const;
  // A GEMM input in the replica's precision: itself for fp32 and tf32, a rounded copy for bf16/fp16.
  const float* operand(MatmulFormat f, const float* m, std::size_t n, gpu::DeviceBuffer<float>& scratch);
  const float* layer_input(const DeviceReplica& d, std::size_t l) const {
    return l == 0 ? d.input.data() : d.out[l - 1].data();
  }

  const Model& model_;
  std::vector<GpuLayer> layers_;
  std::int64_t max_width_ = 0;
  const Dataset& data_;
  Reducer& reducer_;
  EngineSettings s_;
  gpu::Stream stream_;
  gpu::BlasHandle blas_;
  std::vector<DeviceReplica> dev_;  // by position in run_micro's span
  gpu::DeviceBuffer<float> round_a_, round_b_, round_c_;
  gpu::DeviceBuffer<double> sums_, totals_;  // per-feature BN sums out of the kernels / totals into them
  std::vector<double> bn_parts_, bn_totals_, bn_means_, terms_;
  std::vector<std::int32_t> correct_;
  // Evaluation: the dataset stays on the device once uploaded.
  const Dataset* eval_data_ = nullptr;
  gpu::DeviceBuffer<float> eval_x_, eval_params_, eval_buffers_, eval_a_, eval_b_;
  gpu::DeviceBuffer<std::int32_t> eval_y_, eval_correct_;
  gpu::DeviceBuffer<double> eval_terms_;
};

GpuEngine::GpuEngine(const Model& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings)
    : model_(model), layers_(gpu_layers(model)), data_(train), reducer_(reducer), s_(settings), blas_(stream_.get()) {
  if (s_.chunk != s_.plan.micro_batch) throw std::logic_error("the GPU engine processes a micro-batch as one chunk");
  max_width_ = std::max(model_.in_features(), model_.classes());
  for (const GpuLayer& l : layers_) max_width_ = std::max(max_width_, l.out);
  const std::int64_t w = max_width_;
  const std::size_t rows = sz(std::max(s_.plan.micro_batch, kEvalBatch));
  round_a_ = gpu::DeviceBuffer<float>(rows * sz(w));
  round_c_ = gpu::DeviceBuffer<float>(rows * sz(w));
  std::size_t max_weight = 0;
  for (const GpuLayer& l : layers_)
    if (l.kind == GpuKind::linear) max_weight = std::max(max_weight, sz(l.in * l.out));
  round_b_ = gpu::DeviceBuffer<float>(max_weight);
  sums_ = gpu::DeviceBuffer<double>(2 * sz(w));
  totals_ = gpu::DeviceBuffer<double>(2 * sz(w));
  const std::size_t terms = rows * sz(model_.classes());  // ASL: one term per class
  terms_.resize(terms);
  correct_.resize(rows);
  eval_params_ = gpu::DeviceBuffer<float>(model_.num_params());
  eval_buffers_ = gpu::DeviceBuffer<float>(model_.num_buffers());
  eval_a_ = gpu::DeviceBuffer<float>(sz(kEvalBatch * w));
  eval_b_ = gpu::DeviceBuffer<float>(sz(kEvalBatch * w));
  eval_terms_ = gpu::DeviceBuffer<double>(sz(kEvalBatch));
  eval_correct_ = gpu::DeviceBuffer<std::int32_t>(sz(kEvalBatch));
}

// The host side of a replica: what the step loop reads and writes.
void GpuEngine::allocate(Replica& r) const {
  const std::size_t mb = sz(s_.plan.micro_batch);
  r.params.assign(model_.num_params(), 0.0f);
  r.grads.assign(model_.num_params(), 0.0f);
  r.buffers.assign(model_.num_buffers(), 0.0f);
  r.samples.assign(mb, 0);
  r.step_samples.assign(mb * sz(s_.plan.accum_steps), 0);
  r.labels.assign(mb, 0);
  r.input.assign(mb * sz(model_.in_features()), 0.0f);
  r.loss_parts.assign(1, 0.0);
}

DeviceReplica& GpuEngine::device_replica(std::size_t k, const Replica& r) {
  if (k == dev_.size()) {
    const std::size_t mb = sz(s_.plan.micro_batch);
    const auto& layers = layers_;
    DeviceReplica d;
    d.rank = r.rank;
    d.params = gpu::DeviceBuffer<float>(model_.num_params());
    d.grads = gpu::DeviceBuffer<float>(model_.num_params());
    d.input = gpu::DeviceBuffer<float>(mb * sz(model_.in_features()));
    d.dcur = gpu::DeviceBuffer<float>(mb * sz(max_width_));
    d.dnext = gpu::DeviceBuffer<float>(mb * sz(max_width_));
    for (const GpuLayer& layer : layers) {
      const std::size_t n = mb * sz(layer.out);
      const bool bn = layer.kind == GpuKind::batchnorm;
      d.out.emplace_back(n);
      d.aux.emplace_back(bn || layer.kind == GpuKind::dropout ? n : 0);
      d.bn_mean.emplace_back(bn ? sz(layer.out) : 0);
      d.bn_invstd.emplace_back(bn ? sz(layer.out) : 0);
    }
    d.labels = gpu::DeviceBuffer<std::int32_t>(mb);
    d.correct = gpu::DeviceBuffer<std::int32_t>(mb);
    d.samples = gpu::DeviceBuffer<std::int64_t>(mb);
    d.terms = gpu::DeviceBuffer<double>(mb * sz(model_.classes()));
    d.host.resize(mb * sz(max_width_));
    for (const GpuLayer& layer : layers) {
      d.host_bn_mean.emplace_back(layer.kind == GpuKind::batchnorm ? sz(layer.out) : 0);
      d.host_bn_invstd.emplace_back(layer.kind == GpuKind::batchnorm ? sz(layer.out) : 0);
    }
    dev_.push_back(std::move(d));
  }
  if (k >= dev_.size() || dev_[k].rank != r.rank)
    throw std::logic_error("GpuEngine: replicas must come in the same order at every micro-step");
  return dev_[k];
}

void GpuEngine::upload_inputs(Replica& r, DeviceReplica& d, std::int64_t step, int micro) {
  const std::int64_t dim = data_.dim;
  for (std::size_t i = 0; i < r.samples.size(); ++i) {
    const std::int64_t s = r.samples[i];
    float* dst = r.input.data() + sz(static_cast<std::int64_t>(i) * dim);
    if (s_.augment)
      augment_image(data_.row(s), dst, data_, r.knobs.augment_seed, step, s);
    else
      std::copy_n(data_.row(s), sz(dim), dst);
    r.labels[i] = data_.y[sz(s)];
  }
  const cudaStream_t stream = stream_.get();
  d.input.upload(r.input, stream);
  d.labels.upload(r.labels, stream);
  d.samples.upload(r.samples, stream);
  if (micro == 0) d.params.upload(r.params, stream);  // parameters change only between steps
  if (micro == 0) std::fill(r.grads.begin(), r.grads.end(), 0.0f);  // micro-step 0 starts the step's gradient
  d.grads.upload(r.grads, stream);                     // the step's gradient so far: micro-steps accumulate
}

gpu::Blas GpuEngine::blas(MatmulFormat f) const {
  return {blas_.get(), stream_.get(), f == MatmulFormat::tf32 ? gpu::GemmMath::tf32 : gpu::GemmMath::fp32_pedantic};
}

const float* GpuEngine::operand(MatmulFormat f, const float* m, std::size_t n, gpu::DeviceBuffer<float>& scratch) {
  if (f == MatmulFormat::fp32 || f == MatmulFormat::tf32) return m;
  gpu::round_to_format(m, scratch.data(), n, f, stream_.get());
  return scratch.data();
}

void GpuEngine::host_stats(const gpu::DeviceBuffer<float>& device, std::int64_t cols, std::vector<float>& host,
                           double* out) {
  const std::int64_t rows = s_.plan.micro_batch;
  device.download(std::span<float>(host.data(), sz(rows * cols)), stream_.get());
  activation_stats(ConstMatView(host.data(), rows, cols), std::span<double, kStatCount>(out, kStatCount));
}

void GpuEngine::run_micro(std::span<Replica> replicas, std::int64_t step, int micro, float grad_scale,
                          LayerStatsBuffer* stats) {
  const auto& layers = layers_;
  const std::size_t L = layers.size();
  for (std::size_t k = 0; k < replicas.size(); ++k)
    upload_inputs(replicas[k], device_replica(k, replicas[k]), step, micro);

  for (std::size_t l = 0; l < L; ++l) {
    forward_layer(replicas, l, step);
    if (stats)
      for (std::size_t k = 0; k < replicas.size(); ++k)
        host_stats(dev_[k].out[l], layers[l].out, dev_[k].host, stats->forward.data() + (k * L + l) * kStatCount);
  }
  for (std::size_t k = 0; k < replicas.size(); ++k) loss(replicas[k], dev_[k], grad_scale);
  for (std::size_t l = L; l-- > 0;) {
    if (stats)
      for (std::size_t k = 0; k < replicas.size(); ++k)
        host_stats(dev_[k].dcur, layers[l].out, dev_[k].host, stats->backward.data() + (k * L + l) * kStatCount);
    backward_layer(replicas, l);
  }
  for (std::size_t k = 0; k < replicas.size(); ++k) dev_[k].grads.download(replicas[k].grads, stream_.get());
}

void GpuEngine::forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step) {
  const GpuLayer& layer = layers_[l];
  const int rows = i32(s_.plan.micro_batch);
  const std::size_t n = sz(s_.plan.micro_batch * layer.out);
  const cudaStream_t stream = stream_.get();
  switch (layer.kind) {
    case GpuKind::linear:
      for (std::size_t k = 0; k < replicas.size(); ++k) {
        DeviceReplica& d = dev_[k];
        const MatmulFormat f = replicas[k].knobs.matmul;
        const float* w = operand(f, d.params.data() + layer.weight, sz(layer.in * layer.out), round_b_);
        const float* x = operand(f, layer_input(d, l), sz(s_.plan.micro_batch * layer.in), round_a_);
        gpu::linear_forward(blas(f), x, w, d.params.data() + layer.bias, rows, i32(layer.in), i32(layer.out),
                            d.out[l].data());
      }
      return;
    case GpuKind::relu:
      for (DeviceReplica& d : dev_) gpu::relu_forward(layer_input(d, l), d.out[l].data(), n, stream);
      return;
    case GpuKind::dropout: {
      // The CPU's keyed masks, drawn on the device: (step, global sample index, layer), never the rank.
      const auto keep = static_cast<float>(1.0 - layer.drop);
      const float scale = 1.0f / keep;
      for (std::size_t k = 0; k < replicas.size(); ++k) {
        DeviceReplica& d = dev_[k];
        gpu::keyed_uniform_rows(replicas[k].knobs.dropout_seed, static_cast<std::uint32_t>(Stream::dropout),
                                static_cast<std::uint32_t>(step), d.samples.data(), layer.index, rows,
                                i32(layer.out), d.aux[l].data(), stream);
        gpu::dropout_mask(d.aux[l].data(), n, keep, scale, stream);
        gpu::dropout_apply(layer_input(d, l), d.aux[l].data(), d.out[l].data(), n, stream);
      }
      return;
    }
    case GpuKind::batchnorm:
      batchnorm_forward(replicas, layer);
      return;
  }
}

double GpuEngine::combine_bn_sums(std::size_t ranks, std::size_t n) {
  if (s_.sync_bn) {
    bn_totals_.assign(ranks * n, 0.0);
    reducer_.sum_statistics(std::span<const double>(bn_parts_.data(), ranks * n), 1,
                            std::span<double>(bn_totals_.data(), n));
    for (std::size_t k = 1; k < ranks; ++k) std::copy_n(bn_totals_.data(), n, bn_totals_.data() + k * n);
    return static_cast<double>(s_.plan.micro_batch * s_.plan.world_size);
  }
  bn_totals_ = bn_parts_;
  return static_cast<double>(s_.plan.micro_batch);
}

void GpuEngine::batchnorm_forward(std::span<Replica> replicas, const GpuLayer& layer) {
  const std::size_t l = layer.index, n = sz(layer.out), ranks = replicas.size();
  const int rows = i32(s_.plan.micro_batch), cols = i32(layer.out);
  const cudaStream_t stream = stream_.get();

  // Two passes over double sums, as the CPU engine: mean, then squared deviations from it.
  bn_parts_.assign(ranks * n, 0.0);
  for (std::size_t k = 0; k < ranks; ++k) {
    gpu::bn_partial_sum(layer_input(dev_[k], l), rows, cols, sums_.data(), stream);
    sums_.download(std::span<double>(bn_parts_.data() + k * n, n), stream);
  }
  const double count = combine_bn_sums(ranks, n);
  bn_means_.resize(ranks * n);
  for (std::size_t i = 0; i < ranks * n; ++i) bn_means_[i] = bn_totals_[i] / count;

  for (std::size_t k = 0; k < ranks; ++k) {
    totals_.upload(std::span<const double>(bn_means_.data() + k * n, n), stream);
    gpu::bn_partial_sqdev(layer_input(dev_[k], l), rows, cols, totals_.data(), sums_.data(), stream);
    sums_.download(std::span<double>(bn_parts_.data() + k * n, n), stream);
  }
  combine_bn_sums(ranks, n);

  const double m = layer.momentum, eps = layer.eps;
  for (std::size_t k = 0; k < ranks; ++k) {
    Replica& r = replicas[k];
    DeviceReplica& d = dev_[k];
    float* running_mean = r.buffers.data() + layer.running_mean;
    float* running_var = r.buffers.data() + layer.running_var;
    for (std::size_t i = 0; i < n; ++i) {
      const double var = bn_totals_[k * n + i] / count;
      d.host_bn_mean[l][i] = static_cast<float>(bn_means_[k * n + i]);
      d.host_bn_invstd[l][i] = static_cast<float>(1.0 / std::sqrt(var + eps));
      // PyTorch: running stats use the unbiased variance and momentum m.
      running_mean[i] = static_cast<float>((1.0 - m) * running_mean[i] + m * bn_means_[k * n + i]);
      running_var[i] = static_cast<float>((1.0 - m) * running_var[i] + m * var * count / std::max(1.0, count - 1.0));
    }
    d.bn_mean[l].upload(d.host_bn_mean[l], stream);
    d.bn_invstd[l].upload(d.host_bn_invstd[l], stream);
    gpu::bn_normalize(layer_input(d, l), rows, cols, d.bn_mean[l].data(), d.bn_invstd[l].data(),
                      d.params.data() + layer.weight, d.params.data() + layer.bias, d.aux[l].data(),
                      d.out[l].data(), stream);
  }
}

void GpuEngine::loss(Replica& r, DeviceReplica& d, float step_scale) {
  const int rows = i32(s_.plan.micro_batch), classes = i32(model_.classes());
  const float grad_scale = step_scale * static_cast<float>(r.loss_scale);
  const LossParams& p = r.knobs.loss;
  const cudaStream_t stream = stream_.get();
  if (p.asl)
    gpu::asl_forward_backward(d.out.back().data(), d.labels.data(), rows, classes, p.gamma_pos, p.gamma_neg, p.margin,
                              grad_scale, d.dcur.data(), d.terms.data(), d.correct.data(), stream);
  else
    gpu::cross_entropy_forward_backward(d.out.back().data(), d.labels.data(), rows, classes, p.label_smoothing,
                                        grad_scale, d.dcur.data(), d.terms.data(), d.correct.data(), stream);
  const std::size_t terms = sz(rows) * (p.asl ? sz(classes) : 1);
  d.terms.download(std::span<double>(terms_.data(), terms), stream);
  d.correct.download(std::span<std::int32_t>(correct_.data(), sz(rows)), stream);
  double sum = 0.0;  // in the CPU's order, so equal terms give equal bits
  for (std::size_t t = 0; t < terms; ++t) sum += terms_[t];
  r.loss_parts[0] += sum;
  r.loss_sum += sum;
  for (int i = 0; i < rows; ++i) r.correct += correct_[sz(i)];
}

void GpuEngine::backward_layer(std::span<Replica> replicas, std::size_t l) {
  const GpuLayer& layer = layers_[l];
  const int rows = i32(s_.plan.micro_batch);
  const std::size_t n = sz(s_.plan.micro_batch * layer.out);
  const cudaStream_t stream = stream_.get();
  switch (layer.kind) {
    case GpuKind::linear:
      for (std::size_t k = 0; k < replicas.size(); ++k) {
        DeviceReplica& d = dev_[k];
        const MatmulFormat f = replicas[k].knobs.matmul;
        const float* w = operand(f, d.params.data() + layer.weight, sz(layer.in * layer.out), round_b_);
        const float* dy = operand(f, d.dcur.data(), n, round_c_);
        const float* x = operand(f, layer_input(d, l), sz(s_.plan.micro_batch * layer.in), round_a_);
        // The first layer's input gradient is not needed (the input is data).
        gpu::linear_backward(blas(f), dy, x, w, rows, i32(layer.in), i32(layer.out), d.grads.data() + layer.weight,
                             d.grads.data() + layer.bias, l == 0 ? nullptr : d.dnext.data());
      }
      break;
    case GpuKind::relu:
      for (DeviceReplica& d : dev_) gpu::relu_backward(d.dcur.data(), d.out[l].data(), d.dnext.data(), n, stream);
      break;
    case GpuKind::dropout:
      for (DeviceReplica& d : dev_) gpu::dropout_apply(d.dcur.data(), d.aux[l].data(), d.dnext.data(), n, stream);
      break;
    case GpuKind::batchnorm:
      batchnorm_backward(replicas, layer);
      break;
  }
  for (DeviceReplica& d : dev_) std::swap(d.dcur, d.dnext);
}

void GpuEngine::batchnorm_backward(std::span<Replica> replicas, const GpuLayer& layer) {
  const std::size_t l = layer.index, n = sz(layer.out), ranks = replicas.size();
  const int rows = i32(s_.plan.micro_batch), cols = i32(layer.out);
  const cudaStream_t stream = stream_.get();
  // Per rank: [sum dy | sum dy*xhat], also added to dbeta and dgamma by the kernel.
  bn_parts_.assign(ranks * 2 * n, 0.0);
  for (std::size_t k = 0; k < ranks; ++k) {
    DeviceReplica& d = dev_[k];
    gpu::bn_backward_sums(d.dcur.data(), d.aux[l].data(), rows, cols, sums_.data(), sums_.data() + n,
                          d.grads.data() + layer.weight, d.grads.data() + layer.bias, stream);
    sums_.download(std::span<double>(bn_parts_.data() + k * 2 * n, 2 * n), stream);
  }
  const double count = combine_bn_sums(ranks, 2 * n);
  for (std::size_t k = 0; k < ranks; ++k) {
    DeviceReplica& d = dev_[k];
    totals_.upload(std::span<const double>(bn_totals_.data() + k * 2 * n, 2 * n), stream);
    gpu::bn_backward_dx(d.dcur.data(), d.aux[l].data(), rows, cols, d.bn_invstd[l].data(),
                        d.params.data() + layer.weight, totals_.data(), totals_.data() + n, count, d.dnext.data(),
                        stream);
  }
}

EvalResult GpuEngine::evaluate(const Replica& r, const Dataset& data) {
  const cudaStream_t stream = stream_.get();
  if (eval_data_ != &data) {  // the evaluation set is fixed for a run: upload it once
    eval_x_ = gpu::DeviceBuffer<float>(data.x.size());
    eval_y_ = gpu::DeviceBuffer<std::int32_t>(data.y.size());
    eval_x_.upload(data.x, stream);
    eval_y_.upload(data.y, stream);
    eval_data_ = &data;
  }
  eval_params_.upload(r.params, stream);
  eval_buffers_.upload(r.buffers, stream);
  const MatmulFormat f = r.knobs.matmul;
  double loss = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < data.n; first += kEvalBatch) {
    const std::int64_t rows = std::min(kEvalBatch, data.n - first);
    const float* cur = eval_x_.data() + sz(first * data.dim);
    float* next = eval_a_.data();
    for (const GpuLayer& layer : layers_) {
      const std::size_t n = sz(rows * layer.out);
      switch (layer.kind) {
        case GpuKind::linear:
          gpu::linear_forward(blas(f), operand(f, cur, sz(rows * layer.in), round_a_),
                              operand(f, eval_params_.data() + layer.weight, sz(layer.in * layer.out), round_b_),
                              eval_params_.data() + layer.bias, i32(rows), i32(layer.in), i32(layer.out), next);
          break;
        case GpuKind::batchnorm:
          gpu::bn_forward_eval(cur, i32(rows), i32(layer.out), eval_buffers_.data() + layer.running_mean,
                               eval_buffers_.data() + layer.running_var, layer.eps,
                               eval_params_.data() + layer.weight, eval_params_.data() + layer.bias, next, stream);
          break;
        case GpuKind::relu:
          gpu::relu_forward(cur, next, n, stream);
          break;
        case GpuKind::dropout:
          continue;  // identity in eval mode
      }
      cur = next;
      next = next == eval_a_.data() ? eval_b_.data() : eval_a_.data();
    }
    gpu::cross_entropy_eval(cur, eval_y_.data() + first, i32(rows), i32(model_.classes()), eval_terms_.data(),
                            eval_correct_.data(), stream);
    eval_terms_.download(std::span<double>(terms_.data(), sz(rows)), stream);
    eval_correct_.download(std::span<std::int32_t>(correct_.data(), sz(rows)), stream);
    double batch = 0.0;  // the CPU sums each batch on its own, then adds it
    for (std::int64_t i = 0; i < rows; ++i) batch += terms_[sz(i)];
    loss += batch;
    for (std::int64_t i = 0; i < rows; ++i) correct += correct_[sz(i)];
  }
  const auto n = static_cast<double>(data.n);
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace

std::unique_ptr<Engine> make_gpu_engine(const Model& model, const Dataset& train, Reducer& reducer,
                                        const EngineSettings& settings, int /*process: select_device names it*/,
                                        MPI_Comm comm) {
  // The same on every process (configuration), so throwing before the collective below is safe.
  if (settings.deterministic)
    throw ConfigError("dist.reduce", "deterministic mode runs on the CPU only (run.device=cpu); with "
                                     "run.device=cuda use dist.reduce=mpi");
  gpu::select_device(comm);
  return std::make_unique<GpuEngine>(model, train, reducer, settings);
}

}  // namespace divsim
