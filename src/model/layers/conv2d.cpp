// Conv2d, https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html, on NCHW samples:
// inp (B, C, H, W) -> out (B, K, H', W'), H' = (H + 2 pad - k) / stride + 1 (W' alike), with w (K, C, k, k),
// b (K). Settings: out (K), kernel (k), stride (1), padding (0), bias (1/0). Init as PyTorch:
// kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(C k k), 1/sqrt(C k k)) for w and b.
//
// Mathematically the product cols w^T of im2col rows (B H' W', C k k) that the MatrixProduct {H' W', C k k,
// K} declares; computed as an implicit GEMM, sample by sample, with this file's own register-blocked
// kernels and no im2col matrix:
//   - A sample's input is split into stride^2 zero-padded "phase planes", plane (ry, rx) of channel c
//     holding xpad[c][s i + ry][s j + rx] in rows of Wq floats. The input under tap (c, kh, kw) of output
//     (oh, ow) then lies at plane (kh % s, kw % s, c), position (oh + kh / s) Wq + ow + kw / s: at a fixed
//     offset from q = oh Wq + ow. So over the positions q of the output's padded-width layout (K, H' Wq),
//     the receptive field row of tap r is the plane buffer read from offset off[r] on, contiguous, and
//     y (K, H' Wq) = w (K, C k k) x [those rows] is a GEMM whose second operand is read in place (16 q
//     per vector, 4 output channels x 6 vectors per register tile). Columns ow >= W' are computed and
//     dropped when the result is written into NCHW y.
//   - The input gradient is the transposed convolution, split the same way by the phase of the input
//     position: dx at input rows (ih + pad) = s i + ry takes taps kh = ry + s t only, from dy rows i - t.
//     Per phase that is a stride-1 correlation of zero-padded dy with the taps of that phase (the flipped
//     kernel when s = 1), the same kernel again, scattered into NCHW dx.
//   - The weight gradient dw[k][r] = sum over the chunk's samples and positions of dy[k][q] x_r[q], with dy
//     in the padded-width layout (zeros in the dropped columns): dot products over q in 16 lanes, each
//     lane summing its positions sample after sample, then the 16 lanes summed in a fixed tree and stored
//     or added onto dw with one rounding (gemm_backend.hpp, accumulate_adds_rounded_product, holds).
// Every output element of forward and of backward_input is one chain of fused multiply-adds over the
// reduction in a fixed order, whatever the tiling, the block's other rows or the vector width (AVX-512,
// AVX2+FMA or the portable lanes give the same bits); the weight gradient's order depends on the chunk's
// rows only. Nothing is saved for backward: it rebuilds the planes from the input, a copy of x per sample.
// All scratch is the per-call workspace. Operands are rounded to the replica's matmul format (tf32/bf16/
// fp16 emulation) per sample before the planes are built (rounding is per element, so the bits of
// rounding im2col rows), and the weights through the engine's scratch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "model/layer.hpp"
#include "numerics/simd.hpp"

namespace divsim {
namespace {

// Sixteen float lanes, whatever the instruction set: the weight gradient's lanes are part of its
// summation order, so they stay sixteen everywhere.
constexpr std::int64_t kLanes = 16;
#if defined(__AVX512F__)
struct V {
  __m512 v;
};
inline V vzero() { return {_mm512_setzero_ps()}; }
inline V vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V vset(float x) { return {_mm512_set1_ps(x)}; }
inline V vfma(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline void vstore(float* p, V a) { _mm512_storeu_ps(p, a.v); }
inline void vkeep(V& a) { asm("" : "+v"(a.v)); }  // pins a value in a register (an empty asm reads it there)
// Register tiles: forward/input products kMR rows x kNV vectors, weight gradient kGR rows x kGN taps.
constexpr int kMR = 4, kNV = 6, kGR = 4, kGN = 6;
// Channel-vectorised tiles (kCR positions or taps x 2 vectors of channels, kCR4 x 4), 4 only on AVX-512.
constexpr int kCR = 12, kCR4 = 6;
#elif defined(__AVX2__) && defined(__FMA__)
struct V {
  __m256 lo, hi;
};
inline V vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V vset(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline V vfma(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline void vstore(float* p, V a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline void vkeep(V& a) { asm("" : "+x"(a.lo), "+x"(a.hi)); }
constexpr int kMR = 4, kNV = 1, kGR = 2, kGN = 2;
constexpr int kCR = 3, kCR4 = 0;
#else
struct V {
  float l[kLanes];
};
inline V vzero() { return V{}; }
inline V vload(const float* p) {
  V a;
  std::memcpy(a.l, p, sizeof a.l);
  return a;
}
inline V vset(float x) {
  V a;
  std::fill_n(a.l, kLanes, x);
  return a;
}
inline V vfma(V a, V b, V c) {
  for (std::int64_t i = 0; i < kLanes; ++i) c.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
  return c;
}
inline void vstore(float* p, V a) { std::memcpy(p, a.l, sizeof a.l); }
inline void vkeep(V&) {}
constexpr int kMR = 2, kNV = 1, kGR = 2, kGN = 2;
constexpr int kCR = 2, kCR4 = 0;
#endif

// out[i][16 v + l] = sum over r of panel[r MR + i] base[off[r] + 16 v + l], for i < MR, v < NV: one
// accumulator per element, r in order.
template <int MR, int NV>
void product_tile(const float* panel, const std::int32_t* off, std::int64_t R, const float* base, float* out,
                  std::int64_t ldo) {
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = vzero();
  for (std::int64_t r = 0; r < R; ++r) {
    const float* b = base + off[r];
    V x[NV];
    for (int v = 0; v < NV; ++v) x[v] = vload(b + v * kLanes);
    for (int i = 0; i < MR; ++i) {
      const V a = vset(panel[r * MR + i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = vfma(a, x[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) vstore(out + i * ldo + v * kLanes, acc[i][v]);
}

template <int MR, int NV = 1>
void product_vectors(int nv, const float* panel, const std::int32_t* off, std::int64_t R, const float* base, float* out,
                     std::int64_t ldo) {
  if constexpr (NV < kNV)
    if (nv != NV) return product_vectors<MR, NV + 1>(nv, panel, off, R, base, out, ldo);
  product_tile<MR, NV>(panel, off, R, base, out, ldo);
}

template <int MR = 1>
void product_rows(int mr, int nv, const float* panel, const std::int32_t* off, std::int64_t R, const float* base,
                  float* out, std::int64_t ldo) {
  if constexpr (MR < kMR)
    if (mr != MR) return product_rows<MR + 1>(mr, nv, panel, off, R, base, out, ldo);
  product_vectors<MR>(nv, panel, off, R, base, out, ldo);
}

// out (M, ldo): out[m][q] = sum over r < R of a[m][r] base[off[r] + q] for q < 16 nq, with a packed by
// pack_panels. Position tiles outside, so a tile's inputs stay in L1 while the rows' panels pass.
void implicit_product(const float* panels, std::int64_t M, const std::int32_t* off, std::int64_t R, const float* base,
                      std::int64_t nq, float* out, std::int64_t ldo) {
  for (std::int64_t q0 = 0; q0 < nq; q0 += kNV)
    for (std::int64_t m0 = 0; m0 < M; m0 += kMR)
      product_rows(static_cast<int>(std::min<std::int64_t>(kMR, M - m0)), static_cast<int>(std::min<std::int64_t>(kNV, nq - q0)),
                   panels + m0 * R, off, R, base + q0 * kLanes, out + m0 * ldo + q0 * kLanes, ldo);
}

// a[m][r] = w[m row_step + column[r]] (m < M, r < R) into panels of kMR rows (the last one narrower), each
// r-major: panel of rows m0.. at m0 R, element (m0 + i, r) at m0 R + r width + i.
void pack_panels(const float* w, std::int64_t M, std::int64_t row_step, const std::int64_t* column, std::int64_t R,
                 float* panels) {
  for (std::int64_t m0 = 0; m0 < M; m0 += kMR) {
    const std::int64_t width = std::min<std::int64_t>(kMR, M - m0);
    float* panel = panels + m0 * R;
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t i = 0; i < width; ++i) panel[r * width + i] = w[(m0 + i) * row_step + column[r]];
  }
}

// acc[i][j][l] (rows of R taps of 16 lanes, at the tile's first row and tap) += over samples s < n, in
// order, and vectors v < nq: dy_s[i][16 v + l] base_s[off[j] + 16 v + l].
template <int MR, int NR>
void gradient_tile(const float* dy, std::int64_t ldd, std::int64_t dy_step, const float* base, std::int64_t base_step,
                   std::int64_t n, const std::int32_t* off, std::int64_t nq, float* acc, std::int64_t acc_row) {
  V a[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) a[i][j] = vload(acc + i * acc_row + j * kLanes);
  for (std::int64_t s = 0; s < n; ++s) {
    const float* d = dy + s * dy_step;
    const float* b = base + s * base_step;
    for (std::int64_t v = 0; v < nq; ++v) {
      V g[MR];
      for (int i = 0; i < MR; ++i) g[i] = vload(d + i * ldd + v * kLanes);
      for (int j = 0; j < NR; ++j) {
        V x = vload(b + off[j] + v * kLanes);
        // In a register: GCC otherwise folds this unaligned load into each of the MR FMAs as a memory
        // operand, MR loads where one does, and the kernel becomes load-bound.
        vkeep(x);
        for (int i = 0; i < MR; ++i) a[i][j] = vfma(g[i], x, a[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) vstore(acc + i * acc_row + j * kLanes, a[i][j]);
}

template <int MR, int NR = 1>
void gradient_taps(int nr, const float* dy, std::int64_t ldd, std::int64_t dy_step, const float* base,
                   std::int64_t base_step, std::int64_t n, const std::int32_t* off, std::int64_t nq, float* acc,
                   std::int64_t acc_row) {
  if constexpr (NR < kGN)
    if (nr != NR) return gradient_taps<MR, NR + 1>(nr, dy, ldd, dy_step, base, base_step, n, off, nq, acc, acc_row);
  gradient_tile<MR, NR>(dy, ldd, dy_step, base, base_step, n, off, nq, acc, acc_row);
}

template <int MR = 1>
void gradient_rows(int mr, int nr, const float* dy, std::int64_t ldd, std::int64_t dy_step, const float* base,
                   std::int64_t base_step, std::int64_t n, const std::int32_t* off, std::int64_t nq, float* acc,
                   std::int64_t acc_row) {
  if constexpr (MR < kGR)
    if (mr != MR) return gradient_rows<MR + 1>(mr, nr, dy, ldd, dy_step, base, base_step, n, off, nq, acc, acc_row);
  gradient_taps<MR>(nr, dy, ldd, dy_step, base, base_step, n, off, nq, acc, acc_row);
}

// The same products vectorised over the rows m instead (M a multiple of 32), for outputs with few
// positions, where 16-position vectors would carry many dropped columns: out[i][m0 + 16 v + l] =
// sum over r of at[r lda + m0 + 16 v + l] at[i][off[r]], i < MR positions (at[i] = base + that position),
// v < NV. Every element is the same FMA chain as in product_tile, so the same bits.
template <int MR, int NV>
void channel_tile(const float* at, std::int64_t lda, const std::int32_t* off, std::int64_t R, const float* const* at_pos,
                  float* out, std::int64_t ldo) {
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = vzero();
  for (std::int64_t r = 0; r < R; ++r) {
    V a[NV];
    for (int v = 0; v < NV; ++v) a[v] = vload(at + r * lda + v * kLanes);
    const std::int32_t o = off[r];
    for (int i = 0; i < MR; ++i) {
      const V x = vset(at_pos[i][o]);
      for (int v = 0; v < NV; ++v) acc[i][v] = vfma(a[v], x, acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) vstore(out + i * ldo + v * kLanes, acc[i][v]);
}

template <int NV, int MR = 1>
void channel_positions(int mr, const float* at, std::int64_t lda, const std::int32_t* off, std::int64_t R,
                       const float* const* at_pos, float* out, std::int64_t ldo) {
  constexpr int kMax = NV == 4 ? kCR4 : kCR;
  if constexpr (MR < kMax)
    if (mr != MR) return channel_positions<NV, MR + 1>(mr, at, lda, off, R, at_pos, out, ldo);
  channel_tile<MR, NV>(at, lda, off, R, at_pos, out, ldo);
}

// out (positions, M), channels-last: out[p][m] = sum over r < R of at[r][m] base[off[r] + position[p]].
void channel_product(const float* at, std::int64_t M, const std::int32_t* off, std::int64_t R, const float* base,
                     const std::int32_t* position, std::int64_t positions, float* out) {
  const float* at_pos[kCR];
  for (std::int64_t m0 = 0; m0 < M; m0 += 2 * kLanes) {
    const bool four = kCR4 > 0 && M - m0 >= 4 * kLanes;
    const int width = four ? kCR4 : kCR;
    for (std::int64_t p0 = 0; p0 < positions; p0 += width) {
      const int mr = static_cast<int>(std::min<std::int64_t>(width, positions - p0));
      for (int i = 0; i < mr; ++i) at_pos[i] = base + position[p0 + i];
      if constexpr (kCR4 > 0)
        if (four) {
          channel_positions<4>(mr, at + m0, M, off, R, at_pos, out + p0 * M + m0, M);
          continue;
        }
      channel_positions<2>(mr, at + m0, M, off, R, at_pos, out + p0 * M + m0, M);
    }
    if (four) m0 += 2 * kLanes;
  }
}

// The weight gradient vectorised over the K output channels (K a multiple of 32): acc[r0 + j][m0 + 16 v + l]
// (rows of K floats) += over samples s < n, in order, and positions p in order: x_s[off[r0 + j] +
// position[p]] dyt_s[p][m0 + 16 v + l], dyt the sample's dy channels-last. One chain per element.
template <int MR, int NV>
void channel_gradient_tile(const float* dyt, std::int64_t K, std::int64_t dy_step, const float* base, std::int64_t base_step,
                           std::int64_t n, const std::int32_t* off, const std::int32_t* position, std::int64_t positions,
                           float* acc) {
  V a[MR][NV];
  for (int j = 0; j < MR; ++j)
    for (int v = 0; v < NV; ++v) a[j][v] = vload(acc + j * K + v * kLanes);
  for (std::int64_t s = 0; s < n; ++s) {
    const float* d = dyt + s * dy_step;
    const float* b[MR];
    for (int j = 0; j < MR; ++j) b[j] = base + s * base_step + off[j];
    for (std::int64_t p = 0; p < positions; ++p) {
      V g[NV];
      for (int v = 0; v < NV; ++v) g[v] = vload(d + p * K + v * kLanes);
      const std::int32_t q = position[p];
      for (int j = 0; j < MR; ++j) {
        const V x = vset(b[j][q]);
        for (int v = 0; v < NV; ++v) a[j][v] = vfma(g[v], x, a[j][v]);
      }
    }
  }
  for (int j = 0; j < MR; ++j)
    for (int v = 0; v < NV; ++v) vstore(acc + j * K + v * kLanes, a[j][v]);
}

template <int NV, int MR = 1>
void channel_gradient_taps(int mr, const float* dyt, std::int64_t K, std::int64_t dy_step, const float* base,
                           std::int64_t base_step, std::int64_t n, const std::int32_t* off, const std::int32_t* position,
                           std::int64_t positions, float* acc) {
  constexpr int kMax = NV == 4 ? kCR4 : kCR;
  if constexpr (MR < kMax)
    if (mr != MR)
      return channel_gradient_taps<NV, MR + 1>(mr, dyt, K, dy_step, base, base_step, n, off, position, positions, acc);
  channel_gradient_tile<MR, NV>(dyt, K, dy_step, base, base_step, n, off, position, positions, acc);
}

// The 16 lanes summed in a fixed tree: lanes l and l + 8, then l + 4, l + 2, l + 1.
float lane_sum(const float* lanes) {
  float a[kLanes];
  std::copy_n(lanes, kLanes, a);
  for (std::int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (std::int64_t i = 0; i < w; ++i) a[i] = a[i] + a[i + w];
  return a[0];
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
std::int64_t vectors(std::int64_t n) { return (n + kLanes - 1) / kLanes; }

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
    set_output({out_, oh_, ow_});
    const double bound = 1.0 / std::sqrt(static_cast<double>(field_));
    add_param("weight", {out_, c_, k_, k_}, Init::uniform(bound));
    if (bias_) add_param("bias", {out_}, Init::uniform(bound));
    add_product({positions_, field_, out_});
    plan_forward();
    plan_input_gradient();
    // Workspace, floats: forward: weight panels, planes, the product (K, ldq), a rounded sample. Input
    // gradient: each phase's weight panels, padded dy, a phase's product, a rounded sample of dy. Weight
    // gradient: the lanes (K, C k k, 16), then per sample of a group: planes, dy in the padded-width layout;
    // a rounded sample of x and of dy; the bias sums.
    const std::int64_t rounded_x = c_ * h_ * w_, rounded_dy = out_ * positions_;
    const std::int64_t forward = out_ * field_ + planes_size_ + out_ * ldq_ + rounded_x;
    const std::int64_t input = input_panels_ + dy_planes_size_ + c_ * phase_ldq_ + rounded_dy;
    // Samples per group of the weight gradient: their planes and dy about fill 512 KiB (L2).
    group_ = std::clamp<std::int64_t>((std::int64_t{1} << 17) / (planes_size_ + out_ * ldq_), 1, 64);
    const std::int64_t params = out_ * field_ * kLanes + group_ * (planes_size_ + out_ * ldq_) + rounded_x + rounded_dy + out_;
    add_workspace(0, std::max({forward, input, params}));
  }

  // Per sample: planes of the rounded input, y (K, H' Wq) = w [planes at off[r]], into NCHW y plus bias.
  void forward(const Pass& p) const override {
    float* panels = p.work.data();
    float* planes = panels + out_ * field_;
    float* product = planes + planes_size_;
    const std::span<float> rounded = p.work.subspan(static_cast<std::size_t>(out_ * field_ + planes_size_ + out_ * ldq_),
                                                    static_cast<std::size_t>(c_ * h_ * w_));
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, field_));
    if (channels_)
      transpose_weights(w.data(), panels);
    else
      pack_panels(w.data(), out_, field_, identity_.data(), field_, panels);
    const float* b = bias_ ? weight_of(p, 1) : nullptr;
    for (std::int64_t i = 0; i < p.rows; ++i) {
      const ConstMatView x = p.round->into(ConstMatView(p.x[0] + i * c_ * h_ * w_, 1, c_ * h_ * w_), rounded);
      build_planes(x.data(), planes);
      float* y = p.y + i * out_ * positions_;
      if (channels_) {
        channel_product(panels, out_, offsets_.data(), field_, planes, positions_at_.data(), positions_, product);
        for (std::int64_t o = 0; o < out_; ++o) {
          const float bo = b ? b[o] : 0.0f;
          for (std::int64_t q = 0; q < positions_; ++q) y[o * positions_ + q] = b ? product[q * out_ + o] + bo : product[q * out_ + o];
        }
        continue;
      }
      implicit_product(panels, out_, offsets_.data(), field_, planes, ldq_ / kLanes, product, ldq_);
      for (std::int64_t o = 0; o < out_; ++o)
        for (std::int64_t r = 0; r < oh_; ++r) {
          const float* from = product + o * ldq_ + r * wq_;
          float* to = y + (o * oh_ + r) * ow_;
          if (b)
            for (std::int64_t c = 0; c < ow_; ++c) to[c] = from[c] + b[o];
          else
            copy_short(from, ow_, to);
        }
    }
  }

  // dw (K, C k k) (+)= sum over the chunk's samples and positions of dy[k][q] x_r[q]; db (K) (+)= sums of dy
  void backward_params(const Pass& p) const override {
    const bool accumulate = p.write == GradWrite::accumulate;
    const std::int64_t R = field_, sample = planes_size_ + out_ * ldq_, acc_row = R * kLanes;
    float* lanes = p.work.data();
    float* group = lanes + out_ * acc_row;
    float* sums = group + group_ * sample;
    const std::span<float> rounded_x = p.work.subspan(static_cast<std::size_t>(sums + out_ - p.work.data()),
                                                      static_cast<std::size_t>(c_ * h_ * w_));
    const std::span<float> rounded_dy = p.work.subspan(static_cast<std::size_t>(rounded_x.data() + rounded_x.size() - p.work.data()),
                                                       static_cast<std::size_t>(out_ * positions_));
    std::fill_n(lanes, out_ * acc_row, 0.0f);
    std::fill_n(sums, out_, 0.0f);
    for (std::int64_t s0 = 0; s0 < p.rows; s0 += group_) {
      const std::int64_t n = std::min(group_, p.rows - s0);
      for (std::int64_t i = 0; i < n; ++i) {
        float* planes = group + i * sample;
        float* dyq = planes + planes_size_;
        const std::int64_t row = s0 + i;
        build_planes(p.round->into(ConstMatView(p.x[0] + row * c_ * h_ * w_, 1, c_ * h_ * w_), rounded_x).data(), planes);
        const float* dy = p.round->into(ConstMatView(p.dy + row * out_ * positions_, 1, out_ * positions_), rounded_dy).data();
        // The bias sums, one chain per channel in position order; the layout copies below vectorise.
        if (bias_)
          for (std::int64_t o = 0; o < out_; ++o) {
            float sum = sums[o];
            for (std::int64_t q = 0; q < positions_; ++q) sum += dy[o * positions_ + q];
            sums[o] = sum;
          }
        if (grad_channels_) {  // dy channels-last, (H' W', K)
          for (std::int64_t o = 0; o < out_; ++o)
            for (std::int64_t q = 0; q < positions_; ++q) dyq[q * out_ + o] = dy[o * positions_ + q];
          continue;
        }
        for (std::int64_t o = 0; o < out_; ++o) {
          float* to = dyq + o * ldq_;
          std::fill_n(to, ldq_, 0.0f);
          for (std::int64_t r = 0; r < oh_; ++r) copy_short(dy + (o * oh_ + r) * ow_, ow_, to + r * wq_);
        }
      }
      if (grad_channels_) {
        for (std::int64_t m0 = 0; m0 < out_; m0 += 2 * kLanes) {
          const bool four = kCR4 > 0 && out_ - m0 >= 4 * kLanes;
          const int width = four ? kCR4 : kCR;
          for (std::int64_t r0 = 0; r0 < R; r0 += width) {
            const int mr = static_cast<int>(std::min<std::int64_t>(width, R - r0));
            const float* dyt = group + planes_size_ + m0;
            float* acc = lanes + r0 * out_ + m0;
            if constexpr (kCR4 > 0)
              if (four) {
                channel_gradient_taps<4>(mr, dyt, out_, sample, group, sample, n, offsets_.data() + r0, positions_at_.data(),
                                         positions_, acc);
                continue;
              }
            channel_gradient_taps<2>(mr, dyt, out_, sample, group, sample, n, offsets_.data() + r0, positions_at_.data(),
                                     positions_, acc);
          }
          if (four) m0 += 2 * kLanes;
        }
        continue;
      }
      for (std::int64_t m0 = 0; m0 < out_; m0 += kGR)
        for (std::int64_t r0 = 0; r0 < R; r0 += kGN)
          gradient_rows(static_cast<int>(std::min<std::int64_t>(kGR, out_ - m0)), static_cast<int>(std::min<std::int64_t>(kGN, R - r0)),
                        group + planes_size_ + m0 * ldq_, ldq_, sample, group, sample, n, offsets_.data() + r0, ldq_ / kLanes,
                        lanes + m0 * acc_row + r0 * kLanes, acc_row);
    }
    float* dw = grad_of(p, 0);
    if (grad_channels_)  // lanes holds dw^T (C k k, K), one sum per element
      for (std::int64_t o = 0; o < out_; ++o)
        for (std::int64_t r = 0; r < R; ++r) {
          const float v = lanes[r * out_ + o];
          dw[o * R + r] = accumulate ? dw[o * R + r] + v : v;
        }
    else
      for (std::int64_t i = 0; i < out_ * R; ++i) {
        const float v = lane_sum(lanes + i * kLanes);
        dw[i] = accumulate ? dw[i] + v : v;
      }
    if (!bias_) return;
    float* db = grad_of(p, 1);
    for (std::int64_t o = 0; o < out_; ++o) db[o] = accumulate ? db[o] + sums[o] : sums[o];
  }

  // Per sample and input phase: dx_phase (C, rows Wd) = w_phase [padded dy at off[r]], scattered into dx.
  void backward_input(const Pass& p) const override {
    if (!p.dx[0]) return;
    float* panels = p.work.data();
    float* dyp = panels + input_panels_;
    float* product = dyp + dy_planes_size_;
    const std::span<float> rounded = p.work.subspan(static_cast<std::size_t>(input_panels_ + dy_planes_size_ + c_ * phase_ldq_),
                                                    static_cast<std::size_t>(out_ * positions_));
    const ConstMatView w = (*p.round)(OperandRounding::weight, ConstMatView(weight_of(p, 0), out_, field_));
    for (const Phase& ph : phases_) {
      const auto R = static_cast<std::int64_t>(ph.columns.size());
      if (input_channels_)  // (R, C): [r][c] = w[column[r] + c k k]
        for (std::int64_t r = 0; r < R; ++r)
          for (std::int64_t c = 0; c < c_; ++c) panels[ph.panels + r * c_ + c] = w.data()[ph.columns[static_cast<std::size_t>(r)] + c * k_ * k_];
      else if (R > 0)
        pack_panels(w.data(), c_, k_ * k_, ph.columns.data(), R, panels + ph.panels);
    }
    std::fill_n(dyp, dy_planes_size_, 0.0f);
    for (std::int64_t i = 0; i < p.rows; ++i) {
      const float* dy = p.round->into(ConstMatView(p.dy + i * out_ * positions_, 1, out_ * positions_), rounded).data();
      // dyp[k][a][b] = dy[k][a - (T - 1)][b - (T - 1)]; the rest stays zero from above.
      for (std::int64_t o = 0; o < out_; ++o)
        for (std::int64_t r = 0; r < oh_; ++r)
          copy_short(dy + (o * oh_ + r) * ow_, ow_, dyp + (o * hd_ + r + taps_ - 1) * wd_ + taps_ - 1);
      float* dx = p.dx[0] + i * c_ * h_ * w_;
      for (const Phase& ph : phases_) {
        const std::int64_t R = static_cast<std::int64_t>(ph.columns.size());
        if (input_channels_ && R > 0) {
          const auto n = static_cast<std::int64_t>(ph.positions.size());
          channel_product(panels + ph.panels, c_, ph.offsets.data(), R, dyp, ph.positions.data(), n, product);
          for (std::int64_t c = 0; c < c_; ++c)
            for (std::int64_t q = 0; q < n; ++q) dx[c * h_ * w_ + ph.targets[static_cast<std::size_t>(q)]] = product[q * c_ + c];
          continue;
        }
        if (R > 0) implicit_product(panels + ph.panels, c_, ph.offsets.data(), R, dyp, ph.nq, product, phase_ldq_);
        for (std::int64_t c = 0; c < c_; ++c)
          for (std::int64_t r = ph.i0; r < ph.i1; ++r) {
            // dx[line + s j] is input column s j + rx - pad, product[from + j] its value (j0 <= j < j1).
            const std::int64_t line = (c * h_ + stride_ * r + ph.ry - pad_) * w_ + ph.rx - pad_;
            const std::int64_t from = c * phase_ldq_ + (r - ph.i0) * wd_ - ph.j0;
            if (R == 0)
              for (std::int64_t j = ph.j0; j < ph.j1; ++j) dx[line + stride_ * j] = 0.0f;
            else if (stride_ == 1)
              copy_short(product + from + ph.j0, ph.j1 - ph.j0, dx + line + ph.j0);
            else
              for (std::int64_t j = ph.j0; j < ph.j1; ++j) dx[line + stride_ * j] = product[from + j];
          }
      }
    }
  }

 private:
  // The phase planes of forward: the phases some tap reads, each C planes of hq_ x wq_, then zeros that
  // the last vectors of a product may read; offsets_[r] of tap r = (c, kh, kw).
  void plan_forward() {
    const std::int64_t s = stride_;
    hq_ = ceil_div(h_ + 2 * pad_, s);
    wq_ = ceil_div(w_ + 2 * pad_, s);
    ldq_ = vectors(oh_ * wq_) * kLanes;
    plane_slot_.assign(static_cast<std::size_t>(s * s), -1);
    for (std::int64_t kh = 0; kh < k_; ++kh)
      for (std::int64_t kw = 0; kw < k_; ++kw) {
        std::int64_t& slot = plane_slot_[static_cast<std::size_t>(kh % s * s + kw % s)];
        if (slot < 0) slot = used_planes_++;
      }
    std::int64_t reach = 0;
    for (std::int64_t c = 0; c < c_; ++c)
      for (std::int64_t kh = 0; kh < k_; ++kh)
        for (std::int64_t kw = 0; kw < k_; ++kw) {
          const std::int64_t slot = plane_slot_[static_cast<std::size_t>(kh % s * s + kw % s)];
          const std::int64_t off = ((slot * c_ + c) * hq_ + kh / s) * wq_ + kw / s;
          offsets_.push_back(static_cast<std::int32_t>(off));
          identity_.push_back(static_cast<std::int64_t>(offsets_.size()) - 1);
          reach = std::max(reach, off + ldq_);
        }
    planes_size_ = std::max(used_planes_ * c_ * hq_ * wq_, reach);
    for (std::int64_t r = 0; r < oh_; ++r)
      for (std::int64_t c = 0; c < ow_; ++c) positions_at_.push_back(static_cast<std::int32_t>(r * wq_ + c));
    const bool sparse = 10 * positions_ < 9 * ldq_;
    channels_ = out_ % (4 * kLanes) == 0 && sparse;
    grad_channels_ = out_ % (2 * kLanes) == 0 && sparse;
  }

  // w (K, C k k) -> (C k k, K), the channel-vectorised products' operand.
  void transpose_weights(const float* w, float* at) const {
    for (std::int64_t o = 0; o < out_; ++o)
      for (std::int64_t r = 0; r < field_; ++r) at[r * out_ + o] = w[o * field_ + r];
  }

  // A sample's rounded input into its phase planes: plane (ry, rx) of channel c, row i, column j holds
  // x[c][s i + ry - pad][s j + rx - pad], zero outside the input; zeros after the planes.
  void build_planes(const float* x, float* planes) const {
    const std::int64_t s = stride_;
    for (std::int64_t ry = 0; ry < s; ++ry)
      for (std::int64_t rx = 0; rx < s; ++rx) {
        const std::int64_t slot = plane_slot_[static_cast<std::size_t>(ry * s + rx)];
        if (slot < 0) continue;
        const std::int64_t j0 = std::clamp<std::int64_t>(ceil_div(pad_ - rx, s), 0, wq_);
        const std::int64_t j1 = std::clamp<std::int64_t>(ceil_div(w_ + pad_ - rx, s), j0, wq_);
        for (std::int64_t c = 0; c < c_; ++c)
          for (std::int64_t i = 0; i < hq_; ++i) {
            float* row = planes + ((slot * c_ + c) * hq_ + i) * wq_;
            const std::int64_t ih = s * i + ry - pad_;
            if (ih < 0 || ih >= h_) {
              std::fill_n(row, wq_, 0.0f);
              continue;
            }
            const std::int64_t line = (c * h_ + ih) * w_ + rx - pad_;  // x[line + s j]: column s j + rx - pad
            std::fill_n(row, j0, 0.0f);
            if (s == 1)
              copy_short(x + line + j0, j1 - j0, row + j0);
            else
              for (std::int64_t j = j0; j < j1; ++j) row[j] = x[line + s * j];
            std::fill(row + j1, row + wq_, 0.0f);
          }
      }
    std::fill(planes + used_planes_ * c_ * hq_ * wq_, planes + planes_size_, 0.0f);
  }

  // The input gradient by phase (ry, rx) of the input position: input rows ih = s i + ry - pad for i in
  // [i0, i1) (columns alike), taps kh = ry + s (T - 1 - t) < k for t < T = ceil(k / s), reading dy padded by
  // T - 1 rows and columns before (hd_ x wd_ per channel) at row i + t.
  struct Phase {
    std::int64_t ry = 0, rx = 0, i0 = 0, i1 = 0, j0 = 0, j1 = 0, nq = 0, panels = 0;
    std::vector<std::int64_t> columns;  // weight index (k, kh, kw) of each tap, less c's part
    std::vector<std::int32_t> offsets;  // its row's offset into the padded dy
    std::vector<std::int32_t> positions, targets;  // valid (i, j): product position, input index ih W + iw
  };

  void plan_input_gradient() {
    const std::int64_t s = stride_;
    taps_ = ceil_div(k_, s);
    const auto first = [&](std::int64_t r) { return std::max<std::int64_t>(0, ceil_div(pad_ - r, s)); };
    const auto end = [&](std::int64_t r, std::int64_t n) {
      return n - 1 + pad_ - r >= 0 ? (n - 1 + pad_ - r) / s + 1 : std::int64_t{0};
    };
    std::int64_t rows = oh_, cols = ow_;
    for (std::int64_t r = 0; r < s; ++r) {
      rows = std::max(rows, end(r, h_));
      cols = std::max(cols, end(r, w_));
    }
    hd_ = rows + taps_ - 1;
    wd_ = cols + taps_ - 1;
    std::int64_t reach = out_ * hd_ * wd_, panels = 0, valid = 0, computed = 0;
    for (std::int64_t ry = 0; ry < s; ++ry)
      for (std::int64_t rx = 0; rx < s; ++rx) {
        Phase ph;
        ph.ry = ry;
        ph.rx = rx;
        ph.i0 = first(ry);
        ph.i1 = std::max(ph.i0, end(ry, h_));
        ph.j0 = first(rx);
        ph.j1 = std::max(ph.j0, end(rx, w_));
        if (ph.i1 == ph.i0 || ph.j1 == ph.j0) continue;
        ph.nq = vectors((ph.i1 - ph.i0) * wd_);
        phase_ldq_ = std::max(phase_ldq_, ph.nq * kLanes);
        for (std::int64_t o = 0; o < out_; ++o)
          for (std::int64_t t = 0; t < taps_; ++t)
            for (std::int64_t u = 0; u < taps_; ++u) {
              const std::int64_t kh = ry + s * (taps_ - 1 - t), kw = rx + s * (taps_ - 1 - u);
              if (kh >= k_ || kw >= k_) continue;
              const std::int64_t off = (o * hd_ + ph.i0 + t) * wd_ + ph.j0 + u;
              ph.columns.push_back(o * field_ + kh * k_ + kw);
              ph.offsets.push_back(static_cast<std::int32_t>(off));
              reach = std::max(reach, off + ph.nq * kLanes);
            }
        for (std::int64_t i = ph.i0; i < ph.i1; ++i)
          for (std::int64_t j = ph.j0; j < ph.j1; ++j) {
            ph.positions.push_back(static_cast<std::int32_t>((i - ph.i0) * wd_ + j - ph.j0));
            ph.targets.push_back(static_cast<std::int32_t>((s * i + ry - pad_) * w_ + s * j + rx - pad_));
          }
        valid += (ph.i1 - ph.i0) * (ph.j1 - ph.j0);
        computed += ph.nq * kLanes;
        ph.panels = panels;
        panels += c_ * static_cast<std::int64_t>(ph.columns.size());
        phases_.push_back(std::move(ph));
      }
    input_panels_ = panels;
    dy_planes_size_ = reach;
    input_channels_ = c_ % (4 * kLanes) == 0 && 10 * valid < 9 * computed;
  }

  std::int64_t c_ = 0, h_ = 0, w_ = 0, out_ = 0, k_ = 1, stride_ = 1, pad_ = 0;
  std::int64_t oh_ = 0, ow_ = 0, positions_ = 0, field_ = 0;  // field_: C k k, one receptive field
  bool bias_ = true;
  // forward and weight gradient: planes hq_ x wq_, products (K, ldq_) over positions oh wq_ + ow
  std::int64_t hq_ = 0, wq_ = 0, ldq_ = 0, used_planes_ = 0, planes_size_ = 0, group_ = 1;
  std::vector<std::int64_t> plane_slot_;  // phase ry s + rx -> its planes' slot, -1 when no tap reads it
  std::vector<std::int32_t> offsets_;     // tap r = (c, kh, kw) -> its row's offset into the planes
  std::vector<std::int64_t> identity_;    // r -> r, the forward's weight columns
  std::vector<std::int32_t> positions_at_;  // output position oh W' + ow -> oh wq_ + ow
  // Where less than 90% of 16-position vectors are kept (7x7, 14x14 outputs), products are vectorised
  // over channels instead: forward and input gradient where K (C) is a multiple of 64 (with 32, 12
  // broadcasts per 24 FMAs ran slower than the dropped lanes cost), the weight gradient where K is a
  // multiple of 32 (1.7-2.5x faster there). A function of the shape only, so of no instruction set;
  // forward and input gradient bits do not depend on it.
  bool channels_ = false, input_channels_ = false, grad_channels_ = false;
  // input gradient
  std::int64_t taps_ = 1, hd_ = 0, wd_ = 0, phase_ldq_ = 0, input_panels_ = 0, dy_planes_size_ = 0;
  std::vector<Phase> phases_;
};

}  // namespace

DIVSIM_REGISTER_LAYER("conv2d", Conv2d);

}  // namespace divsim
