// Global average pooling, https://pytorch.org/docs/stable/generated/torch.nn.AdaptiveAvgPool2d.html with
// output size 1, then flattened: inp (B, C, H, W) -> out (B, C), out = the mean of each channel's plane.
// No parameters, no settings.
#include <stdexcept>

#include "model/layer.hpp"

namespace divsim {
namespace {

// The sum of v[0, n) in eight lanes, lane j taking the elements i with i % 8 == j, added up in a fixed
// tree: fixed bits for a given n wherever v lies (lanes by index, not by alignment), and independent
// lanes that the compiler can keep in one vector register, where a single running sum would wait on
// each add.
float sum_in_lanes(const float* v, std::int64_t n) {
  constexpr std::int64_t kLanes = 8;
  float lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) lane[j] += v[i + j];
  for (std::int64_t j = 0; i + j < n; ++j) lane[j] += v[i + j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

class AvgPool final : public Layer {
 public:
  explicit AvgPool(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != 3)
      throw std::logic_error("layer " + s.name + " (avgpool) needs (C, H, W) samples, got " + to_string(in));
    channels_ = in[0];
    plane_ = in[1] * in[2];
    set_output({channels_});
  }

  // inp (B, C, H, W) -> out (B, C)
  void forward(const Pass& p) const override {
    const auto n = static_cast<float>(plane_);
    for (std::int64_t i = 0; i < p.rows * channels_; ++i) p.y[i] = sum_in_lanes(p.x[0] + i * plane_, plane_) / n;
  }

  // dinp (B, C, H, W) = dy / (H W), spread over each plane
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const auto n = static_cast<float>(plane_);
    for (std::int64_t i = 0; i < p.rows * channels_; ++i) {
      const float g = p.dy[i] / n;
      float* dx = p.dx[0] + i * plane_;
      for (std::int64_t q = 0; q < plane_; ++q) dx[q] = g;
    }
  }

 private:
  std::int64_t channels_ = 0, plane_ = 0;  // plane_: H W, the positions averaged
};

}  // namespace

DIVSIM_REGISTER_LAYER("avgpool", AvgPool);

}  // namespace divsim
