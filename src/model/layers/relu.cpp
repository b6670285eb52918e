// ReLU, https://pytorch.org/docs/stable/generated/torch.nn.ReLU.html, elementwise on any shape.
#include "model/layer.hpp"

namespace divsim {
namespace {

class Relu final : public Layer {
 public:
  explicit Relu(const LayerSpec& s) : Layer(s) { set_output(input_shapes().at(0)); }

  // inp (B, ...) -> out (B, ...), out = max(inp, 0)
  void forward(const Pass& p) const override {
    MatView(p.y, p.rows, out_features()) = ConstMatView(p.x[0], p.rows, out_features()).cwiseMax(0.0f);
  }

  // dinp = dout where out > 0 (the output decides, so the input need not be kept)
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const ConstMatView y(p.y, p.rows, out_features()), dy(p.dy, p.rows, out_features());
    MatView(p.dx[0], p.rows, out_features()) = (y.array() > 0.0f).select(dy, 0.0f);
  }
};

}  // namespace

DIVSIM_REGISTER_LAYER("relu", Relu);

}  // namespace divsim
