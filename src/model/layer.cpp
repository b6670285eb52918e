#include "model/layer.hpp"

#include <algorithm>
#include <stdexcept>

namespace divsim {

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

std::string to_string(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

void column_sums(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride, float* out, GradWrite write) {
  constexpr std::int64_t kBlock = 256;
  float sums[kBlock];
  for (std::int64_t c0 = 0; c0 < cols; c0 += kBlock) {
    const std::int64_t n = std::min(kBlock, cols - c0);
    std::fill_n(sums, n, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * stride + c0;
      for (std::int64_t c = 0; c < n; ++c) sums[c] += row[c];
    }
    float* o = out + c0;
    for (std::int64_t c = 0; c < n; ++c) o[c] = write == GradWrite::accumulate ? o[c] + sums[c] : sums[c];
  }
}

ConstMatView OperandRounding::operator()(Role role, ConstMatView m) const {
  if (format_ == MatmulFormat::fp32) return m;
  const auto n = static_cast<std::size_t>(m.size());
  const std::span<float> scratch = scratch_[role];
  if (n > scratch.size()) throw std::logic_error("operand rounding scratch smaller than a matmul operand");
  std::copy_n(m.data(), n, scratch.data());
  round_to_format(scratch.first(n), format_);
  return ConstMatView(scratch.data(), m.rows(), m.cols());
}

ConstMatView OperandRounding::into(ConstMatView m, std::span<float> memory) const {
  if (format_ == MatmulFormat::fp32) return m;
  const auto n = static_cast<std::size_t>(m.size());
  if (n > memory.size()) throw std::logic_error("operand rounding into memory smaller than the operand");
  std::copy_n(m.data(), n, memory.data());
  round_to_format(memory.first(n), format_);
  return ConstMatView(memory.data(), m.rows(), m.cols());
}

double LayerSpec::option(const std::string& key) const {
  const auto it = options.find(key);
  if (it == options.end()) throw std::logic_error("layer " + name + " (" + style + ") needs the setting " + key);
  return it->second;
}

double LayerSpec::option(const std::string& key, double fallback) const {
  const auto it = options.find(key);
  return it == options.end() ? fallback : it->second;
}

Layer::Layer(const LayerSpec& spec)
    : style_(spec.style), name_(spec.name), inputs_(spec.inputs), options_(spec.options), ties_(spec.ties) {
  if (inputs_.empty()) throw std::logic_error("layer " + name_ + " has no input");
}

void Layer::add_param(std::string name, Shape shape, Init init, bool shareable) {
  const auto tie = ties_.find(name);
  params_.push_back({std::move(name), std::move(shape), init, tie == ties_.end() ? "" : tie->second, shareable});
}

double Layer::option(const std::string& key, double fallback) const {
  const auto it = options_.find(key);
  return it == options_.end() ? fallback : it->second;
}

void Layer::place(std::uint32_t index, std::vector<std::size_t> param_offsets, std::vector<std::size_t> buffer_offsets) {
  if (param_offsets.size() != params_.size() || buffer_offsets.size() != buffers_.size())
    throw std::logic_error("layer " + name_ + ": offsets do not match its tensors");
  for (const auto& [param, key] : ties_)
    if (std::none_of(params_.begin(), params_.end(), [&](const ParamSpec& s) { return s.name == param; }))
      throw std::logic_error("layer " + name_ + " ties " + param + " to " + key + " but has no parameter " + param);
  index_ = index;
  param_offsets_ = std::move(param_offsets);
  buffer_offsets_ = std::move(buffer_offsets);
  shared_.assign(params_.size(), false);
}

void Layer::share(std::size_t i) {
  if (!params_.at(i).shareable) throw std::logic_error("layer " + name_ + "'s " + params_[i].name + " cannot be tied to");
  shared_[i] = true;
}

std::map<std::string, LayerFactory>& layer_registry() {
  static std::map<std::string, LayerFactory> registry;
  return registry;
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  const auto& registry = layer_registry();
  const auto it = registry.find(spec.style);
  if (it == registry.end()) throw std::logic_error("no layer style " + spec.style + " (for " + spec.name + ")");
  return it->second(spec);
}

}  // namespace divsim
