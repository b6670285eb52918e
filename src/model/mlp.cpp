#include "model/mlp.hpp"

#include <algorithm>
#include <cmath>

#include "numerics/philox.hpp"

namespace divsim {

Mlp::Mlp(const ModelSection& cfg, std::int64_t in_features, std::int64_t classes)
    : in_features_(in_features),
      classes_(classes),
      max_width_(std::max(in_features, classes)),
      dropout_(cfg.dropout),
      bn_momentum_(cfg.bn_momentum),
      bn_eps_(cfg.bn_eps) {
  auto add_tensor = [&](const std::string& layer, const std::string& name, std::vector<std::int64_t> shape) {
    std::size_t size = 1;
    for (auto d : shape) size *= static_cast<std::size_t>(d);
    tensors_.push_back({layer, name, layers_.size() - 1, num_params_, size, std::move(shape)});
    num_params_ += size;
    return tensors_.back().offset;
  };
  auto add_layer = [&](LayerKind kind, const std::string& name, std::int64_t in, std::int64_t out) -> Layer& {
    layers_.push_back(Layer{kind, name, in, out});
    layers_.back().index = static_cast<std::uint32_t>(layers_.size() - 1);
    return layers_.back();
  };
  auto add_linear = [&](const std::string& name, std::int64_t in, std::int64_t out) {
    add_layer(LayerKind::linear, name, in, out);
    const std::size_t w = add_tensor(name, "weight", {out, in});
    const std::size_t b = add_tensor(name, "bias", {out});
    layers_.back().weight = w;
    layers_.back().bias = b;
  };

  std::int64_t width = in_features;
  for (std::size_t h = 0; h < cfg.hidden.size(); ++h) {
    const std::string n = std::to_string(h + 1);
    const std::int64_t out = cfg.hidden[h];
    max_width_ = std::max(max_width_, out);
    add_linear("fc" + n, width, out);
    if (cfg.batchnorm) {
      add_layer(LayerKind::batchnorm, "bn" + n, out, out);
      const std::size_t w = add_tensor("bn" + n, "weight", {out});
      const std::size_t b = add_tensor("bn" + n, "bias", {out});
      Layer& bn = layers_.back();
      bn.weight = w;
      bn.bias = b;
      bn.running_mean = num_buffers_;
      bn.running_var = num_buffers_ + static_cast<std::size_t>(out);
      num_buffers_ += 2 * static_cast<std::size_t>(out);
    }
    add_layer(LayerKind::relu, "relu" + n, out, out);
    if (cfg.dropout > 0.0) add_layer(LayerKind::dropout, "drop" + n, out, out);
    width = out;
  }
  add_linear("fc" + std::to_string(cfg.hidden.size() + 1), width, classes);
}

void Mlp::init_parameters(std::span<float> params, std::uint64_t seed) const {
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    const ParamTensor& tensor = tensors_[t];
    float* p = params.data() + tensor.offset;
    const bool is_bn = tensor.layer.starts_with("bn");
    if (is_bn) {
      std::fill(p, p + tensor.size, tensor.name == "weight" ? 1.0f : 0.0f);
      continue;
    }
    // Linear weight and bias share the bound 1/sqrt(fan_in); fan_in is the weight's second dimension.
    const ParamTensor& weight = tensor.name == "weight" ? tensor : tensors_[t - 1];
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(weight.shape[1])));
    const KeyedStream stream(seed, Stream::init, static_cast<std::uint32_t>(t));
    for (std::size_t i = 0; i < tensor.size; ++i) p[i] = (2.0f * stream.uniform(i) - 1.0f) * bound;
  }
}

void Mlp::init_buffers(std::span<float> buffers) const {
  for (const Layer& l : layers_) {
    if (l.kind != LayerKind::batchnorm) continue;
    const auto n = static_cast<std::size_t>(l.out);
    std::fill_n(buffers.begin() + static_cast<std::ptrdiff_t>(l.running_mean), n, 0.0f);
    std::fill_n(buffers.begin() + static_cast<std::ptrdiff_t>(l.running_var), n, 1.0f);
  }
}

}  // namespace divsim
