#pragma once
// The model: an MLP described as a list of layers over one flat parameter buffer.
//
// For each hidden width h: Linear -> [BatchNorm1d] -> ReLU -> [Dropout]; then a final Linear to the
// classes. Names and parameter order follow PyTorch's nn.Sequential registration order (fc1.weight,
// fc1.bias, bn1.weight, ...), so a PyTorch replay can load the tensors one to one and DDP's buckets
// (reverse parameter order) mean the same thing here as there. This file only describes and initialises
// the model; running it over replicas and ranks is train/'s job.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace divsim {

enum class LayerKind { linear, batchnorm, relu, dropout };

struct Layer {
  LayerKind kind;
  std::string name;      // fc1, bn1, relu1, drop1, ..., fcN
  std::int64_t in = 0;   // input features
  std::int64_t out = 0;  // output features
  std::size_t weight = 0, bias = 0;              // linear: w[out,in], b[out]; batchnorm: gamma, beta (offsets)
  std::size_t running_mean = 0, running_var = 0; // batchnorm: offsets into the running-statistics buffer
  std::uint32_t index = 0;                       // position in the layer list (keys dropout masks)
  bool has_params() const { return kind == LayerKind::linear || kind == LayerKind::batchnorm; }
};

struct ParamTensor {
  std::string layer, name;           // e.g. "fc1", "weight"
  std::size_t layer_index = 0;       // position of its layer in Mlp::layers()
  std::size_t offset = 0, size = 0;  // in the flat parameter buffer
  std::vector<std::int64_t> shape;
};

class Mlp {
 public:
  Mlp(const ModelSection& cfg, std::int64_t in_features, std::int64_t classes);

  const std::vector<Layer>& layers() const { return layers_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t num_params() const { return num_params_; }
  std::size_t num_buffers() const { return num_buffers_; }  // BN running mean/var
  std::int64_t in_features() const { return in_features_; }
  std::int64_t classes() const { return classes_; }
  std::int64_t max_width() const { return max_width_; }
  double dropout() const { return dropout_; }
  double bn_momentum() const { return bn_momentum_; }
  double bn_eps() const { return bn_eps_; }

  // PyTorch's defaults: Linear weight kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)), bias the
  // same bound; BatchNorm weight 1, bias 0. Each tensor draws from its own init stream keyed by its index,
  // so a tensor's values do not depend on the others.
  void init_parameters(std::span<float> params, std::uint64_t seed) const;
  void init_buffers(std::span<float> buffers) const;  // running_mean 0, running_var 1

 private:
  std::vector<Layer> layers_;
  std::vector<ParamTensor> tensors_;
  std::size_t num_params_ = 0, num_buffers_ = 0;
  std::int64_t in_features_, classes_, max_width_;
  double dropout_, bn_momentum_, bn_eps_;
};

}  // namespace divsim
