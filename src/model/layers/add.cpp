// Residual add: two inputs of one shape, inp0 (B, ...) + inp1 (B, ...) -> out (B, ...). No parameters, no
// settings. Per element, so the bits do not depend on how the loop is vectorised.
#include <algorithm>
#include <stdexcept>

#include "model/layer.hpp"

namespace divsim {
namespace {

class Add final : public Layer {
 public:
  explicit Add(const LayerSpec& s) : Layer(s) {
    const std::vector<Shape>& in = input_shapes();
    if (in.size() != 2)
      throw std::logic_error("layer " + s.name + " (add) needs two inputs, got " + std::to_string(in.size()));
    if (in[0] != in[1])
      throw std::logic_error("layer " + s.name + " (add) adds inputs of one shape, got " + to_string(in[0]) + " and " +
                             to_string(in[1]));
    set_output(in[0]);
  }

  // inp0 (B, ...), inp1 (B, ...) -> out (B, ...)
  void forward(const Pass& p) const override {
    const std::int64_t n = p.rows * out_features();
    for (std::int64_t i = 0; i < n; ++i) p.y[i] = p.x[0][i] + p.x[1][i];
  }

  // dinp0 = dinp1 = dy
  void backward_input(const Pass& p) const override {
    const std::int64_t n = p.rows * out_features();
    for (float* dx : p.dx)
      if (dx) std::copy_n(p.dy, n, dx);
  }
};

}  // namespace

DIVSIM_REGISTER_LAYER("add", Add);

}  // namespace divsim
