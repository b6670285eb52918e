// Dropout (inverted), https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html: setting p, the
// drop probability. The mask of a sample is keyed by (step, global sample index, layer position), never by
// rank or micro-step, so it does not move when the world size or the accumulation changes; a rank whose
// dropout seed differs (unsynced_seed) draws other masks, as a rank with another torch seed does.
#include "model/layer.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

class Dropout final : public Layer {
 public:
  explicit Dropout(const LayerSpec& s) : Layer(s), keep_(static_cast<float>(1.0 - s.option("p"))) {
    set_output(input_shapes().at(0));
    add_saved("mask", out_features());  // 0 or 1/(1-p) per element
  }

  // inp (B, ...) -> out (B, ...), out = inp * mask
  void forward(const Pass& p) const override {
    const float scale = 1.0f / keep_;
    const std::size_t n = static_cast<std::size_t>(out_features());
    for (std::int64_t i = 0; i < p.rows; ++i) {
      float* mask = p.saved[0] + static_cast<std::size_t>(i) * n;
      KeyedStream(p.keys.dropout_seed, Stream::dropout, static_cast<std::uint32_t>(p.keys.step),
                  static_cast<std::uint32_t>(p.keys.samples[i]), index())
          .fill_uniform(std::span<float>(mask, n));
      // Mask and output row while the row is in cache.
      const float* x = p.x[0] + static_cast<std::size_t>(i) * n;
      float* y = p.y + static_cast<std::size_t>(i) * n;
      for (std::size_t c = 0; c < n; ++c) {
        mask[c] = mask[c] < keep_ ? scale : 0.0f;
        y[c] = x[c] * mask[c];
      }
    }
  }

  void forward_eval(const Pass& p) const override {
    MatView(p.y, p.rows, out_features()) = ConstMatView(p.x[0], p.rows, out_features());
  }

  // dinp = dout * mask
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const ConstMatView dy(p.dy, p.rows, out_features()), mask(p.saved[0], p.rows, out_features());
    MatView(p.dx[0], p.rows, out_features()) = dy.cwiseProduct(mask);
  }

 private:
  float keep_;
};

}  // namespace

DIVSIM_REGISTER_LAYER("dropout", Dropout);

}  // namespace divsim
