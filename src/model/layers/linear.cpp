// Linear, https://pytorch.org/docs/stable/generated/torch.nn.Linear.html, applied to the last axis:
// inp (B, ..., IN) -> out (B, ..., OUT), out = inp w^T + b with w (OUT, IN), b (OUT). Settings: out,
// bias (1/0), init_std. Init as PyTorch: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(IN), 1/sqrt(IN)) for w
// and b; with init_std > 0 as GPT-2 instead: w ~ N(0, init_std), b = 0. The weight may be tied to an
// earlier tensor of the same shape (LayerSpec::ties: GPT-2's output head, logits = h wte^T).
// Every product's operands are rounded to the replica's matmul format (tf32/bf16/fp16 emulation).
#include <algorithm>
#include <cmath>

#include "model/gemm_backend.hpp"
#include "model/layer.hpp"

namespace divsim {
namespace {

class Linear final : public Layer {
 public:
  explicit Linear(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    in_ = in.back();
    out_ = static_cast<std::int64_t>(s.option("out"));
    bias_ = s.option("bias", 1.0) != 0.0;
    rows_per_sample_ = numel(in) / in_;
    Shape out = in;
    out.back() = out_;
    set_output(out);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_)), std = s.option("init_std", 0.0);
    add_param("weight", {out_, in_}, std > 0.0 ? Init::normal(std) : Init::uniform(bound));
    if (bias_) add_param("bias", {out_}, std > 0.0 ? Init::constant(0.0) : Init::uniform(bound));
    add_product({rows_per_sample_, in_, out_});
  }

  // inp (B, ..., IN) -> out (B, ..., OUT)
  void forward(const Pass& p) const override {
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, in_));
    const ConstMatView x = (*p.round)(OperandRounding::activation, ConstMatView(p.x[0], rows(p), in_));
    MatView y(p.y, rows(p), out_);
    gemm_nt(x, w, y);
    if (bias_) y.rowwise() += ConstVecView(weight_of(p, 1), out_).transpose();
  }

  // dw (OUT, IN) += dy^T inp ; db (OUT) += column sums of dy (both over the chunk's rows)
  void backward_params(const Pass& p) const override {
    const bool accumulate = p.write == GradWrite::accumulate;
    const ConstMatView dy = (*p.round)(OperandRounding::gradient, ConstMatView(p.dy, rows(p), out_));
    const ConstMatView x = (*p.round)(OperandRounding::activation, ConstMatView(p.x[0], rows(p), in_));
    gemm_tn(dy, x, MatView(grad_of(p, 0), out_, in_), accumulate);
    if (bias_) column_sums(dy.data(), dy.rows(), out_, out_, grad_of(p, 1), p.write);
  }

  // dinp (B, ..., IN) = dy w
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const ConstMatView dy = (*p.round)(OperandRounding::gradient, ConstMatView(p.dy, rows(p), out_));
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, in_));
    gemm_nn(dy, w, MatView(p.dx[0], rows(p), in_));
  }

 private:
  Eigen::Index rows(const Pass& p) const { return p.rows * rows_per_sample_; }
  std::int64_t in_ = 0, out_ = 0, rows_per_sample_ = 1;
  bool bias_ = true;
};

}  // namespace

DIVSIM_REGISTER_LAYER("linear", Linear);

}  // namespace divsim
