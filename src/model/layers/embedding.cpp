// Token and position embedding of a GPT (nanoGPT's GPT.forward, llm.c's encoder_forward):
// inp (B, T) token ids -> out (B, T, C),  out[b, t] = wte[inp[b, t]] + wpe[t]
// Settings: vocab (V), dim (C). Params wte.weight (V, C) and wpe.weight (T, C), both N(0, 0.02) as GPT-2
// (nn.Embedding's own default is N(0, 1)); wte may be tied to by the output head (ParamSpec::shareable).
// Token ids arrive as float32 (exact below 2^24; the text datasets' vocabularies are far smaller) and are
// in [0, V): the data loader guarantees it. The input is data, so there is no input gradient.
#include <algorithm>
#include <stdexcept>

#include "model/layer.hpp"

namespace divsim {
namespace {

class Embedding final : public Layer {
 public:
  explicit Embedding(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != 1) throw std::logic_error("layer " + s.name + " (embedding) needs (T) token ids, got " + to_string(in));
    t_ = in[0];
    vocab_ = static_cast<std::int64_t>(s.option("vocab"));
    c_ = static_cast<std::int64_t>(s.option("dim"));
    set_output({t_, c_});
    add_param("wte.weight", {vocab_, c_}, Init::normal(0.02), true);
    add_param("wpe.weight", {t_, c_}, Init::normal(0.02));
  }

  // inp (B, T) -> out (B, T, C): one float add per element, as torch's tok_emb + pos_emb.
  void forward(const Pass& p) const override {
    const float* wte = weight_of(p, 0);
    const float* wpe = weight_of(p, 1);
    for (std::int64_t b = 0; b < p.rows; ++b)
      for (std::int64_t t = 0; t < t_; ++t) {
        const float* e = wte + token(p.x[0][b * t_ + t]) * c_;
        const float* q = wpe + t * c_;
        float* y = p.y + (b * t_ + t) * c_;
        for (std::int64_t c = 0; c < c_; ++c) y[c] = e[c] + q[c];
      }
  }

  // dwte[inp[b, t]] += dy[b, t] ; dwpe[t] += sum over b of dy[b, t]   (the chunk's rows, in order)
  void backward_params(const Pass& p) const override {
    float* dwte = grad_of(p, 0);
    float* dwpe = grad_of(p, 1);
    if (write_of(p, 0) == GradWrite::overwrite) std::fill_n(dwte, vocab_ * c_, 0.0f);
    for (std::int64_t b = 0; b < p.rows; ++b)
      for (std::int64_t t = 0; t < t_; ++t) {
        float* g = dwte + token(p.x[0][b * t_ + t]) * c_;
        const float* dy = p.dy + (b * t_ + t) * c_;
        for (std::int64_t c = 0; c < c_; ++c) g[c] += dy[c];
      }
    column_sums(p.dy, p.rows, t_ * c_, t_ * c_, dwpe, write_of(p, 1));
  }

  void backward_input(const Pass&) const override {}

 private:
  static std::int64_t token(float id) { return static_cast<std::int64_t>(id); }
  std::int64_t t_ = 0, vocab_ = 0, c_ = 0;
};

}  // namespace

DIVSIM_REGISTER_LAYER("embedding", Embedding);

}  // namespace divsim
