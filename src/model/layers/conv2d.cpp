// Conv2d, https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html, on NCHW samples:
// inp (B, C, H, W) -> out (B, K, H', W'), H' = (H + 2 pad - k) / stride + 1 (W' alike), with w (K, C, k, k),
// b (K). Settings: out (K), kernel (k), stride (1), padding (0), bias (1/0). Init as PyTorch:
// kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(C k k), 1/sqrt(C k k)) for w and b.
// As im2col + one matrix product per block: each output position of a sample is a row of its receptive
// field, cols (B H' W', C k k), so the block's convolution is the product cols w^T (B H' W', K) that the
// MatrixProduct {H' W', C k k, K} declares, and the weight and input gradients are the Linear ones on
// those rows. The product comes out channels-last and is transposed into NCHW (and dy the other way).
// Every product's operands are rounded to the replica's matmul format (tf32/bf16/fp16 emulation); the
// input is rounded before im2col, which gives the bits of rounding cols (rounding is per element) with a
// scratch of the input's size.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/gemm_backend.hpp"
#include "model/layer.hpp"

namespace divsim {
namespace {

// dst (cols, rows) = src (rows, cols)^T (a sample's dy into channels-last rows), in tiles of kTile source
// rows so the reads stay in L1 while the writes run along dst's rows.
void transpose(const float* src, Eigen::Index rows, Eigen::Index cols, float* dst) {
  constexpr Eigen::Index kTile = 16;
  for (Eigen::Index r0 = 0; r0 < rows; r0 += kTile) {
    const Eigen::Index n = std::min(kTile, rows - r0);
    for (Eigen::Index c = 0; c < cols; ++c)
      for (Eigen::Index r = 0; r < n; ++r) dst[c * rows + r0 + r] = src[(r0 + r) * cols + c];
  }
}

class Conv2d final : public Layer {
 public:
  explicit Conv2d(const LayerSpec& s) : Layer(s) {
    const Shape& in = input_shapes().at(0);
    if (in.size() != 3)
      throw std::logic_error("layer " + s.name + " (conv2d) needs (C, H, W) samples, got " + to_string(in));
    c_ = in[0];
    h_ = in[1];
    w_ = in[2];
    out_ = static_cast<std::int64_t>(s.option("out"));
    k_ = static_cast<std::int64_t>(s.option("kernel"));
    stride_ = static_cast<std::int64_t>(s.option("stride", 1.0));
    pad_ = static_cast<std::int64_t>(s.option("padding", 0.0));
    bias_ = s.option("bias", 1.0) != 0.0;
    if (out_ < 1 || k_ < 1 || stride_ < 1 || pad_ < 0 || h_ + 2 * pad_ < k_ || w_ + 2 * pad_ < k_)
      throw std::logic_error("layer " + s.name + " (conv2d): out, kernel, stride, padding do not fit " + to_string(in));
    oh_ = (h_ + 2 * pad_ - k_) / stride_ + 1;
    ow_ = (w_ + 2 * pad_ - k_) / stride_ + 1;
    positions_ = oh_ * ow_;
    field_ = c_ * k_ * k_;
    if (field_ + out_ > kEvalScratch)
      throw std::logic_error("layer " + s.name + " (conv2d): a receptive field (C k k) and its outputs must fit " +
                             std::to_string(kEvalScratch) + " floats, the evaluation pass's stack buffer");
    set_output({out_, oh_, ow_});
    const double bound = 1.0 / std::sqrt(static_cast<double>(field_));
    add_param("weight", {out_, c_, k_, k_}, Init::uniform(bound));
    if (bias_) add_param("bias", {out_}, Init::uniform(bound));
    // cols: each sample's receptive fields (H' W', C k k) of the rounded input, kept for the weight
    // gradient. channels_last: a sample's (H' W', K) rows, forward's product before its transpose into
    // y and backward's dy transposed for the products. dcols: the input gradient's (H' W', C k k) rows
    // before col2im. The latter two are scratch, saved tensors only so that no call allocates.
    add_saved("cols", positions_ * field_);
    add_saved("channels_last", positions_ * out_);
    add_saved("dcols", positions_ * field_);
    add_product({positions_, field_, out_});
  }

  // inp (B, C, H, W) -> cols (B H' W', C k k) -> (B H' W', K) -> out (B, K, H', W')
  void forward(const Pass& p) const override {
    const ConstMatView x = (*p.round)(OperandRounding::activation, ConstMatView(p.x[0], p.rows, c_ * h_ * w_));
    for (Eigen::Index i = 0; i < p.rows; ++i)
      im2col(x.data() + i * x.cols(), 0, positions_, p.saved[0] + i * positions_ * field_);
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, field_));
    gemm_nt(ConstMatView(p.saved[0], rows(p), field_), w, MatView(p.saved[1], rows(p), out_));
    const float* b = bias_ ? weight_of(p, 1) : nullptr;
    for (Eigen::Index i = 0; i < p.rows; ++i)
      to_channels_first(p.saved[1] + i * positions_ * out_, positions_, b, p.y + i * out_ * positions_);
  }

  // The same convolution without saved tensors (evaluation gets none): each sample's positions go
  // through the product in tiles whose receptive fields and products fit a stack buffer.
  void forward_eval(const Pass& p) const override {
    const ConstMatView x = (*p.round)(OperandRounding::activation, ConstMatView(p.x[0], p.rows, c_ * h_ * w_));
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, field_));
    const float* b = bias_ ? weight_of(p, 1) : nullptr;
    float scratch[kEvalScratch];
    const std::int64_t tile = kEvalScratch / (field_ + out_);
    for (Eigen::Index i = 0; i < p.rows; ++i)
      for (std::int64_t q0 = 0; q0 < positions_; q0 += tile) {
        const std::int64_t n = std::min(tile, positions_ - q0);
        float* cols = scratch;
        float* product = scratch + n * field_;
        im2col(x.data() + i * x.cols(), q0, n, cols);
        gemm_nt(ConstMatView(cols, n, field_), w, MatView(product, n, out_));
        to_channels_first(product, n, b, p.y + i * out_ * positions_ + q0);
      }
  }

  // dw (K, C k k) += dy^T cols ; db (K) += sums of dy over samples and positions (the chunk's rows)
  void backward_params(const Pass& p) const override {
    const bool accumulate = p.write == GradWrite::accumulate;
    const ConstMatView dy = channels_last_dy(p);
    gemm_tn(dy, ConstMatView(p.saved[0], rows(p), field_), MatView(grad_of(p, 0), out_, field_), accumulate);
    if (!bias_) return;
    // Rows added in order, as in linear.cpp and for its reason: Eigen's colwise().sum() peels by
    // alignment, so its bits would depend on where the buffer lies. K of a convolution fits one block.
    constexpr Eigen::Index kBlock = 256;
    float sums[kBlock];
    float* db = grad_of(p, 1);
    for (Eigen::Index c0 = 0; c0 < out_; c0 += kBlock) {
      const Eigen::Index n = std::min(kBlock, out_ - c0);
      std::fill_n(sums, n, 0.0f);
      for (Eigen::Index i = 0; i < dy.rows(); ++i)
        for (Eigen::Index c = 0; c < n; ++c) sums[c] += dy(i, c0 + c);
      for (Eigen::Index c = 0; c < n; ++c) db[c0 + c] = accumulate ? db[c0 + c] + sums[c] : sums[c];
    }
  }

  // dcols (B H' W', C k k) = dy w ; dinp (B, C, H, W) = col2im(dcols)
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    const ConstMatView dy = channels_last_dy(p);
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, field_));
    gemm_nn(dy, w, MatView(p.saved[2], rows(p), field_));
    for (Eigen::Index i = 0; i < p.rows; ++i) col2im(p.saved[2] + i * positions_ * field_, p.dx[0] + i * c_ * h_ * w_);
  }

 private:
  Eigen::Index rows(const Pass& p) const { return p.rows * positions_; }

  // The rounded dy of the pass's rows as (B H' W', K), in the channels_last scratch.
  ConstMatView channels_last_dy(const Pass& p) const {
    const ConstMatView dy = (*p.round)(OperandRounding::gradient, ConstMatView(p.dy, p.rows, out_ * positions_));
    for (Eigen::Index i = 0; i < p.rows; ++i)
      transpose(dy.data() + i * dy.cols(), out_, positions_, p.saved[1] + i * positions_ * out_);
    return ConstMatView(p.saved[1], rows(p), out_);
  }

  // One sample's positions [first, first + n) as rows of cols (n, C k k): row (oh, ow) holds
  // x[c][oh s - pad + kh][ow s - pad + kw] in (c, kh, kw) order, the weight's own order, and zeros where
  // the field hangs over the padding.
  void im2col(const float* x, std::int64_t first, std::int64_t n, float* cols) const {
    float* row = cols;
    for (std::int64_t q = first; q < first + n; ++q) {
      const std::int64_t oh = q / ow_, iw0 = q % ow_ * stride_ - pad_;
      const std::int64_t kw0 = inside_from(iw0), kw1 = inside_to(iw0, kw0);
      for (std::int64_t c = 0; c < c_; ++c)
        for (std::int64_t kh = 0; kh < k_; ++kh, row += k_) {
          const std::int64_t ih = oh * stride_ - pad_ + kh;
          if (ih < 0 || ih >= h_) {
            std::fill_n(row, k_, 0.0f);
            continue;
          }
          const float* line = x + (c * h_ + ih) * w_;
          for (std::int64_t kw = 0; kw < kw0; ++kw) row[kw] = 0.0f;
          for (std::int64_t kw = kw0; kw < kw1; ++kw) row[kw] = line[iw0 + kw];
          for (std::int64_t kw = kw1; kw < k_; ++kw) row[kw] = 0.0f;
        }
    }
  }

  // The n positions of a product tile (n, K) into a sample's NCHW output from position q0 on (y points
  // there), plus the bias; in tiles of kTile positions so the reads stay in L1 while the writes run
  // along y's planes.
  void to_channels_first(const float* product, std::int64_t n, const float* b, float* y) const {
    constexpr std::int64_t kTile = 16;
    for (std::int64_t q0 = 0; q0 < n; q0 += kTile) {
      const std::int64_t m = std::min(kTile, n - q0);
      for (std::int64_t o = 0; o < out_; ++o) {
        float* plane = y + o * positions_ + q0;
        const float* column = product + q0 * out_ + o;
        if (b)
          for (std::int64_t q = 0; q < m; ++q) plane[q] = column[q * out_] + b[o];
        else
          for (std::int64_t q = 0; q < m; ++q) plane[q] = column[q * out_];
      }
    }
  }

  // One sample: dx = 0, then every element of dcols added onto the input element it was copied from in
  // im2col, in the rows' order (a fixed order, so fixed bits).
  void col2im(const float* dcols, float* dx) const {
    std::fill_n(dx, c_ * h_ * w_, 0.0f);
    const float* row = dcols;
    for (std::int64_t oh = 0; oh < oh_; ++oh)
      for (std::int64_t ow = 0; ow < ow_; ++ow) {
        const std::int64_t iw0 = ow * stride_ - pad_;
        const std::int64_t kw0 = inside_from(iw0), kw1 = inside_to(iw0, kw0);
        for (std::int64_t c = 0; c < c_; ++c)
          for (std::int64_t kh = 0; kh < k_; ++kh, row += k_) {
            const std::int64_t ih = oh * stride_ - pad_ + kh;
            if (ih < 0 || ih >= h_) continue;
            float* line = dx + (c * h_ + ih) * w_;
            for (std::int64_t kw = kw0; kw < kw1; ++kw) line[iw0 + kw] += row[kw];
          }
      }
  }

  // The kernel columns [kw0, kw1) of a field starting at input column iw0 that fall inside the input
  // (the others lie in the padding; with padding >= k a field may lie wholly in it).
  std::int64_t inside_from(std::int64_t iw0) const { return std::clamp<std::int64_t>(-iw0, 0, k_); }
  std::int64_t inside_to(std::int64_t iw0, std::int64_t kw0) const { return std::clamp(w_ - iw0, kw0, k_); }

  // Floats of forward_eval's stack buffer (256 KB).
  static constexpr std::int64_t kEvalScratch = std::int64_t{1} << 16;

  std::int64_t c_ = 0, h_ = 0, w_ = 0, out_ = 0, k_ = 1, stride_ = 1, pad_ = 0;
  std::int64_t oh_ = 0, ow_ = 0, positions_ = 0, field_ = 0;  // field_: C k k, one receptive field
  bool bias_ = true;
};

}  // namespace

DIVSIM_REGISTER_LAYER("conv2d", Conv2d);

}  // namespace divsim
