#pragma once
// A model: a registered graph of layer styles over named activations (model/layer.hpp), laid out over one
// flat float32 parameter array and one buffer array. Registered models (DIVSIM_REGISTER_MODEL, one file
// each under model/models/) build the graph with a ModelBuilder; model.type picks one.
//
// Activation 0 is the input batch; every layer reads one or two earlier activations and writes one new
// one, so the list of layers is a topological order: forward runs it top to bottom, backward bottom to
// top, and an activation read by several layers (a residual branch) gets the sum of their input
// gradients. The last layer's output is the logits: (classes) per sample, or (T, classes) for a model
// that predicts every position of a sequence.
//
// Parameters are laid out layer by layer in graph order, each layer's tensors in its declaration order,
// and named as PyTorch's state_dict names them (scope + "." + tensor: "layer1.0.conv1.weight"), so a
// PyTorch module built the same way loads /init and checkpoints one to one, and DDP's buckets (reverse
// parameter order) mean the same thing here as there. A tied parameter (ParamSpec::tied) is one tensor,
// listed where its owner is, as named_parameters() lists it once. This file only describes and initialises the
// model; running it over replicas and ranks is train/'s job.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "model/layer.hpp"

namespace divsim {

struct Node {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;  // activation ids
  int output = 0;
};

struct ParamTensor {
  std::string layer, name;           // e.g. "layer1.0.conv1", "weight"
  std::size_t layer_index = 0;       // position of its layer in Model::nodes()
  std::size_t offset = 0, size = 0;  // in the flat parameter buffer
  Shape shape;
  Init init;
  std::string key() const { return layer + "." + name; }  // the PyTorch state_dict key
};

class ModelBuilder {
 public:
  ModelBuilder(const ModelSection& model, Shape input, std::int64_t class_count)
      : config(model), classes(class_count), shapes_{std::move(input)} {}
  const ModelSection& config;
  const std::int64_t classes;

  static constexpr int input() { return 0; }
  const Shape& shape(int activation) const { return shapes_.at(static_cast<std::size_t>(activation)); }
  // Reads the input as one flat feature vector per sample (it is row-major already: no copy), before any
  // layer is added.
  void flatten_input();
  // Appends a layer of `style` named `name` (its parameters' scope) reading `inputs`; returns its output.
  // `ties` maps a parameter of the new layer to the state_dict key of an earlier layer's tensor it shares.
  int add(const std::string& style, const std::string& name, std::vector<int> inputs,
          std::map<std::string, double> options = {}, std::map<std::string, std::string> ties = {});
  // Evaluation batch (rows per forward in eval mode): fixed per model so eval results do not depend on the
  // world size; smaller for models whose activations are large.
  void eval_batch(std::int64_t rows) { eval_batch_ = rows; }
  // The eval batch whose activations (those added so far) fit `floats`, within [10, 1000] rows: for
  // models whose activations grow with their settings; it never depends on the world size.
  void eval_batch_within(std::int64_t floats);

 private:
  friend class Model;
  std::vector<Node> nodes_;
  std::vector<Shape> shapes_;
  std::int64_t eval_batch_ = 1000;
};

class Model {
 public:
  // Builds model.type (ConfigError naming the registered types for an unknown one).
  Model(const ModelSection& config, const Shape& input, std::int64_t classes);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Layer& layer(std::size_t l) const { return *nodes_[l].layer; }
  std::size_t size() const { return nodes_.size(); }
  const std::vector<Shape>& activations() const { return shapes_; }  // per-sample shapes, [0] = input
  std::int64_t features(int activation) const { return numel(shapes_[static_cast<std::size_t>(activation)]); }
  int readers(int activation) const { return readers_[static_cast<std::size_t>(activation)]; }
  int logits() const { return nodes_.back().output; }
  // Rows of logits per sample: 1, or T for a sequence model.
  std::int64_t targets() const { return features(logits()) / classes_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t num_params() const { return num_params_; }
  std::size_t num_buffers() const { return num_buffers_; }
  std::int64_t in_features() const { return features(0); }
  std::int64_t classes() const { return classes_; }
  std::int64_t eval_batch() const { return eval_batch_; }
  // Floats of every activation of one sample (memory planning).
  std::int64_t activation_floats() const;
  // Floats the layers keep from forward for backward, per sample (memory planning).
  std::int64_t saved_floats_per_sample() const;
  // Whether some layer keeps statistics across rows (BatchNorm): SyncBN and bn_drift apply.
  bool has_batch_statistics() const;
  bool has_style(const std::string& style) const;

  // The graph as JSON, for the output file's `model` attribute: what a reader needs to rebuild the network
  // elsewhere (validation/torch_graph.py builds it in PyTorch): type, input shape, classes, and per layer
  // its name, style, input and output activations, settings, output shape and tensor names.
  std::string to_json(const std::string& type) const;

  // Each tensor draws from its own init stream keyed by its index, so one tensor's values do not depend on
  // another's; the rule (bound, std, constant) is the layer style's (PyTorch's defaults).
  void init_parameters(std::span<float> params, std::uint64_t seed) const;
  void init_buffers(std::span<float> buffers) const;

 private:
  // The offset of the earlier tensor that `p` of `layer` is, whose owner then adds its gradient.
  std::size_t tie(const Layer& layer, const ParamSpec& p);

  std::vector<Node> nodes_;
  std::vector<Shape> shapes_;
  std::vector<int> readers_;
  std::vector<ParamTensor> tensors_;
  std::vector<float> buffer_init_;
  std::size_t num_params_ = 0, num_buffers_ = 0;
  std::int64_t classes_ = 0, eval_batch_ = 0;
};

using ModelBuild = std::function<void(ModelBuilder&)>;
std::map<std::string, ModelBuild>& model_registry();

struct ModelRegistrar {
  ModelRegistrar(const char* type, ModelBuild build) { model_registry()[type] = std::move(build); }
};

#define DIVSIM_REGISTER_MODEL(TYPE, FUNCTION) static const ::divsim::ModelRegistrar model_registrar_##FUNCTION(TYPE, FUNCTION)

}  // namespace divsim
