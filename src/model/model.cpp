#include "model/model.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "config/config_error.hpp"
#include "numerics/philox.hpp"
#include "record/json.hpp"

namespace divsim {

int ModelBuilder::add(const std::string& style, const std::string& name, std::vector<int> inputs,
                      std::map<std::string, double> options, std::map<std::string, std::string> ties) {
  LayerSpec spec{style, name, {}, std::move(options), std::move(ties)};
  for (const int a : inputs) {
    if (a < 0 || static_cast<std::size_t>(a) >= shapes_.size())
      throw std::logic_error("layer " + name + " reads an activation that does not exist yet");
    spec.inputs.push_back(shapes_[static_cast<std::size_t>(a)]);
  }
  Node node{make_layer(spec), std::move(inputs), static_cast<int>(shapes_.size())};
  shapes_.push_back(node.layer->output_shape());
  nodes_.push_back(std::move(node));
  return nodes_.back().output;
}

void ModelBuilder::flatten_input() {
  if (!nodes_.empty()) throw std::logic_error("flatten_input after a layer was added");
  shapes_[0] = {numel(shapes_[0])};
}

void ModelBuilder::eval_batch_within(std::int64_t floats) {
  std::int64_t per_sample = 0;
  for (const Shape& s : shapes_) per_sample += numel(s);
  eval_batch_ = std::clamp<std::int64_t>(floats / per_sample, 10, 1000);
}

std::map<std::string, ModelBuild>& model_registry() {
  static std::map<std::string, ModelBuild> registry;
  return registry;
}

Model::Model(const ModelSection& config, const Shape& input, std::int64_t classes) : classes_(classes) {
  const auto it = model_registry().find(config.type);
  if (it == model_registry().end()) {
    std::string known;
    for (const auto& entry : model_registry()) known += (known.empty() ? "" : ", ") + entry.first;
    throw ConfigError("model.type", "'" + config.type + "' is not one of: " + known);
  }
  ModelBuilder b(config, input, classes);
  it->second(b);
  if (b.nodes_.empty()) throw std::logic_error("model " + config.type + " has no layers");
  nodes_ = std::move(b.nodes_);
  shapes_ = std::move(b.shapes_);
  eval_batch_ = b.eval_batch_;
  if (shapes_.back().empty() || shapes_.back().back() != classes || shapes_.back().size() > 2)
    throw std::logic_error("model " + config.type + " ends in " + to_string(shapes_.back()) +
                           ", not one logit per class (per position)");

  readers_.assign(shapes_.size(), 0);
  for (std::size_t l = 0; l < nodes_.size(); ++l) {
    Layer& layer = *nodes_[l].layer;
    for (const int a : nodes_[l].inputs) ++readers_[static_cast<std::size_t>(a)];
    std::vector<std::size_t> params, buffers;
    for (const ParamSpec& p : layer.params()) {
      if (!p.tied.empty()) {
        params.push_back(tie(layer, p));
        continue;
      }
      const auto size = static_cast<std::size_t>(numel(p.shape));
      params.push_back(num_params_);
      tensors_.push_back({layer.name(), p.name, l, num_params_, size, p.shape, p.init});
      num_params_ += size;
    }
    for (const BufferSpec& s : layer.buffers()) {
      buffers.push_back(num_buffers_);
      buffer_init_.insert(buffer_init_.end(), static_cast<std::size_t>(s.size), s.value);
      num_buffers_ += static_cast<std::size_t>(s.size);
    }
    layer.place(static_cast<std::uint32_t>(l), std::move(params), std::move(buffers));
  }
}

std::size_t Model::tie(const Layer& layer, const ParamSpec& p) {
  const auto owner = std::find_if(tensors_.begin(), tensors_.end(), [&](const ParamTensor& t) { return t.key() == p.tied; });
  if (owner == tensors_.end())
    throw std::logic_error("layer " + layer.name() + " ties " + p.name + " to " + p.tied + ", which no earlier layer has");
  if (owner->shape != p.shape)
    throw std::logic_error("layer " + layer.name() + " ties " + p.name + " " + to_string(p.shape) + " to " + p.tied + " " +
                           to_string(owner->shape));
  Layer& o = *nodes_[owner->layer_index].layer;
  if (&o == &layer) throw std::logic_error("layer " + layer.name() + " ties " + p.name + " to its own " + p.tied);
  for (std::size_t i = 0; i < o.params().size(); ++i)
    if (o.params()[i].name == owner->name) o.share(i);
  return owner->offset;
}

std::int64_t Model::activation_floats() const {
  std::int64_t n = 0;
  for (const Shape& s : shapes_) n += numel(s);
  return n;
}

std::int64_t Model::saved_floats_per_sample() const {
  std::int64_t n = 0;
  for (const Node& node : nodes_)
    for (const SavedSpec& s : node.layer->saved()) n += s.per_sample;
  return n;
}

bool Model::has_batch_statistics() const {
  return std::any_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.layer->statistics() != nullptr; });
}

bool Model::has_style(const std::string& style) const {
  return std::any_of(nodes_.begin(), nodes_.end(), [&](const Node& n) { return n.layer->style() == style; });
}

namespace {

std::string json_shape(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string Model::to_json(const std::string& type) const {
  std::string out = "{\"type\": " + json_string(type) + ", \"input\": " + json_shape(shapes_[0]) +
                    ", \"classes\": " + std::to_string(classes_) + ", \"layers\": [";
  for (std::size_t l = 0; l < nodes_.size(); ++l) {
    const Layer& layer = *nodes_[l].layer;
    out += std::string(l ? ",\n  " : "\n  ") + "{\"name\": " + json_string(layer.name()) +
           ", \"style\": " + json_string(layer.style()) + ", \"inputs\": [";
    for (std::size_t i = 0; i < nodes_[l].inputs.size(); ++i) out += (i ? ", " : "") + std::to_string(nodes_[l].inputs[i]);
    out += "], \"output\": " + std::to_string(nodes_[l].output) + ", \"options\": {";
    bool first = true;
    for (const auto& [key, value] : layer.options()) {
      out += (first ? "" : ", ") + json_string(key) + ": " + json_number(value);
      first = false;
    }
    out += "}, \"output_shape\": " + json_shape(layer.output_shape()) + ", \"params\": [";
    first = true;
    for (const ParamSpec& p : layer.params()) {
      if (!p.tied.empty()) continue;
      out += (first ? "" : ", ") + json_string(p.name);
      first = false;
    }
    out += "], \"tied\": {";
    first = true;
    for (const ParamSpec& p : layer.params()) {
      if (p.tied.empty()) continue;
      out += (first ? "" : ", ") + json_string(p.name) + ": " + json_string(p.tied);
      first = false;
    }
    out += "}, \"buffers\": [";
    for (std::size_t i = 0; i < layer.buffers().size(); ++i) out += (i ? ", " : "") + json_string(layer.buffers()[i].name);
    out += "], \"products\": [";
    for (std::size_t i = 0; i < layer.products().size(); ++i) {
      const MatrixProduct& m = layer.products()[i];
      out += (i ? ", [" : "[") + std::to_string(m.rows_per_sample) + ", " + std::to_string(m.in) + ", " + std::to_string(m.out) + "]";
    }
    out += "]}";
  }
  return out + "\n]}";
}

void Model::init_parameters(std::span<float> params, std::uint64_t seed) const {
  for (std::size_t t = 0; t < tensors_.size(); ++t) {
    const ParamTensor& tensor = tensors_[t];
    const Init& init = tensor.init;
    float* p = params.data() + tensor.offset;
    if (init.kind == Init::Kind::constant) {
      std::fill(p, p + tensor.size, static_cast<float>(init.value));
      continue;
    }
    const KeyedStream stream(seed, Stream::init, static_cast<std::uint32_t>(t));
    const auto scale = static_cast<float>(init.value);
    if (init.kind == Init::Kind::uniform)
      for (std::size_t i = 0; i < tensor.size; ++i) p[i] = (2.0f * stream.uniform(i) - 1.0f) * scale;
    else
      for (std::size_t i = 0; i < tensor.size; ++i) p[i] = static_cast<float>(init.value * stream.normal(i));
  }
}

void Model::init_buffers(std::span<float> buffers) const { std::copy(buffer_init_.begin(), buffer_init_.end(), buffers.begin()); }

}  // namespace divsim
