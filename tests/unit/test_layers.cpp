// Unit tests of src/model: every layer's and loss's (label-smoothed cross-entropy, ASL) backward against
// central finite differences of an independent double-precision forward, the losses against closed
// forms, and the Mlp's parameter layout and initialisation. Each gradient check prints the largest error
// it saw ("max abs err ... OK").
//
// Method: a layer's float outputs y are scored as L = sum(G * y) with a fixed random G, so dL/dy = G is
// what the backward receives. The reference derivative is the central difference (h = 1e-6) of L computed
// entirely in double from the same float inputs: its own error (~1e-10) is far below float32's, so the
// comparison measures the float32 backward alone. Tolerance: max abs err <= 1e-5 * max |reference|
// over the tensor; a few float roundings per element stay near 1e-7 of that.
// Not here: running layers through the step engine (test_engine.cpp).
#include <gtest/gtest.h>

#ifdef DIVSIM_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "model/gemm_backend.hpp"
#include "model/layers.hpp"
#include "model/loss.hpp"
#include "model/mlp.hpp"
#include "numerics/philox.hpp"

using namespace divsim;

namespace {

constexpr double kFdStep = 1e-6;
constexpr double kFloatRel = 1e-5;

// Test data: standard normal draws times `scale`, keyed by `what` so every tensor is different.
std::vector<float> normal_values(std::size_t n, std::uint32_t what, double scale = 1.0) {
  const KeyedStream s(20240611, Stream::synthetic, what);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * s.normal(i));
  return v;
}

std::vector<double> to_double(std::span<const float> v) { return {v.begin(), v.end()}; }

// Central differences of f with respect to every element of theta (restored afterwards).
std::vector<double> fd_gradient(std::vector<double>& theta, const std::function<double()>& f) {
  std::vector<double> g(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const double keep = theta[i];
    theta[i] = keep + kFdStep;
    const double up = f();
    theta[i] = keep - kFdStep;
    const double down = f();
    theta[i] = keep;
    g[i] = (up - down) / (2 * kFdStep);
  }
  return g;
}

// got (float32) vs want: max abs err <= rel * max |want|; prints the comparison either way.
void expect_close(const std::string& what, std::span<const float> got, std::span<const double> want,
                  double rel = kFloatRel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double tol = rel * scale;
  std::printf("[ check    ] %-32s max abs err %.3g (max |ref| %.3g, tol %.3g): %s\n", what.c_str(), err, scale, tol,
              err <= tol ? "OK" : "NOT OK");
  EXPECT_LE(err, tol) << what;
  EXPECT_GT(scale, 0.0) << what << ": an all-zero reference checks nothing";
}

double weighted_sum(std::span<const double> g, std::span<const double> y) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += g[i] * y[i];
  return s;
}

ConstMatView cview(const std::vector<float>& v, Eigen::Index rows, Eigen::Index cols) {
  return ConstMatView(v.data(), rows, cols);
}
MatView view(std::vector<float>& v, Eigen::Index rows, Eigen::Index cols) { return MatView(v.data(), rows, cols); }

// Label-smoothed cross-entropy of one row in double, straight from its definition.
double reference_row_loss(std::span<const double> logits, int label, double eps) {
  double m = -std::numeric_limits<double>::infinity();
  for (const double z : logits) m = std::max(m, z);
  double s = 0;
  for (const double z : logits) s += std::exp(z - m);
  const double lse = m + std::log(s);
  const double c = static_cast<double>(logits.size());
  double loss = 0;
  for (std::size_t k = 0; k < logits.size(); ++k) {
    const double target = eps / c + (static_cast<int>(k) == label ? 1 - eps : 0.0);
    loss += target * (lse - logits[k]);
  }
  return loss;
}

ModelSection model_cfg(std::vector<std::int64_t> hidden, bool batchnorm, double dropout) {
  ModelSection c;
  c.hidden = std::move(hidden);
  c.batchnorm = batchnorm;
  c.dropout = dropout;
  return c;
}

}  // namespace

TEST(LayerGrad, LinearMatchesFiniteDifferencesAndAccumulates) {
  const Eigen::Index B = 5, IN = 4, OUT = 3;
  const auto x = normal_values(B * IN, 1), w = normal_values(OUT * IN, 2, 0.5), b = normal_values(OUT, 3);
  const auto G = to_double(normal_values(B * OUT, 4));
  std::vector<float> y(B * OUT);
  linear_forward(cview(x, B, IN), cview(w, OUT, IN), b, view(y, B, OUT));

  std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b);
  auto ref_forward = [&] {
    std::vector<double> out(B * OUT);
    for (Eigen::Index i = 0; i < B; ++i)
      for (Eigen::Index o = 0; o < OUT; ++o) {
        double s = bd[o];
        for (Eigen::Index k = 0; k < IN; ++k) s += xd[i * IN + k] * wd[o * IN + k];
        out[i * OUT + o] = s;
      }
    return out;
  };
  expect_close("linear y", y, ref_forward());
  auto loss = [&] { return weighted_sum(G, ref_forward()); };
  const auto want_dx = fd_gradient(xd, loss), want_dw = fd_gradient(wd, loss), want_db = fd_gradient(bd, loss);

  // Parameter gradients accumulate onto what is there; dx is overwritten (NaN would survive otherwise).
  const float pre = 0.25f;
  std::vector<float> Gf(G.begin(), G.end()), dw(OUT * IN, pre), db(OUT, pre);
  std::vector<float> dx(B * IN, std::numeric_limits<float>::quiet_NaN());
  linear_backward(cview(Gf, B, OUT), cview(x, B, IN), cview(w, OUT, IN), view(dw, OUT, IN), db, view(dx, B, IN));
  for (float& v : dw) v -= pre;
  for (float& v : db) v -= pre;
  expect_close("linear dx", dx, want_dx);
  expect_close("linear dw (accumulated)", dw, want_dw);
  expect_close("linear db (accumulated)", db, want_db);

  // GradWrite::overwrite: what was in dw and db is replaced, bit for bit what accumulating onto zeros gives.
  std::vector<float> dw0(OUT * IN, 0.0f), db0(OUT, 0.0f), dx0(B * IN);
  linear_backward(cview(Gf, B, OUT), cview(x, B, IN), cview(w, OUT, IN), view(dw0, OUT, IN), db0, view(dx0, B, IN));
  std::vector<float> dw1(OUT * IN, std::numeric_limits<float>::quiet_NaN()), db1(OUT, 7.0f), dx1(B * IN);
  linear_backward(cview(Gf, B, OUT), cview(x, B, IN), cview(w, OUT, IN), view(dw1, OUT, IN), db1, view(dx1, B, IN),
                  GradWrite::overwrite);
  EXPECT_EQ(dw1, dw0);
  EXPECT_EQ(db1, db0);
  EXPECT_EQ(dx1, dx0);

  // No dx rows: the input gradient is skipped, the parameter gradients are not.
  std::vector<float> dw2(OUT * IN, 0.0f), db2(OUT, 0.0f);
  linear_backward(cview(Gf, B, OUT), cview(x, B, IN), cview(w, OUT, IN), view(dw2, OUT, IN), db2,
                  MatView(nullptr, 0, IN));
  expect_close("linear dw (no dx)", dw2, want_dw);
}

// The `env` attribute's gemm= names the kernel that computed the matrix products, so that runs compared
// bit for bit can be told apart: the products' bits must be those of the kernel it names, computed here
// directly. K = 300 makes Eigen's and OpenBLAS's summation orders differ in at least one of the three
// products (checked, or the test would prove nothing; on an AVX2 Zen the NN products happen to agree).
TEST(GemmBackend, ProductsComeFromTheKernelItNames) {
  const Eigen::Index K = 300, M = 24, N = 40;
  const auto a = normal_values(K * M, 41), b = normal_values(K * N, 42), w = normal_values(M * N, 43);
  std::vector<float> tn(M * N), nn(K * M), nt(M * N), eigen_tn(M * N), eigen_nn(K * M), eigen_nt(M * N);
  gemm_tn(cview(a, K, M), cview(b, K, N), view(tn, M, N), false);
  gemm_nn(cview(b, K, N), cview(w, N, M), view(nn, K, M));
  gemm_nt(cview(a, M, K), cview(b, N, K), view(nt, M, N));
  view(eigen_tn, M, N).noalias() = cview(a, K, M).transpose() * cview(b, K, N);
  view(eigen_nn, K, M).noalias() = cview(b, K, N) * cview(w, N, M);
  view(eigen_nt, M, N).noalias() = cview(a, M, K) * cview(b, N, K).transpose();
  const std::string backend = gemm_backend();
  if (backend.rfind("Eigen", 0) == 0) {
    EXPECT_EQ(tn, eigen_tn) << backend;
    EXPECT_EQ(nn, eigen_nn) << backend;
    EXPECT_EQ(nt, eigen_nt) << backend;
    return;
  }
#ifdef DIVSIM_HAVE_OPENBLAS
  std::vector<float> blas_tn(M * N), blas_nn(K * M), blas_nt(M * N);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), M, b.data(), N, 0.0f, blas_tn.data(), N);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, M, N, 1.0f, b.data(), N, w.data(), M, 0.0f, blas_nn.data(), M);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, blas_nt.data(), N);
  EXPECT_EQ(tn, blas_tn) << backend;
  EXPECT_EQ(nn, blas_nn) << backend;
  EXPECT_EQ(nt, blas_nt) << backend;
  EXPECT_TRUE(blas_tn != eigen_tn || blas_nn != eigen_nn || blas_nt != eigen_nt)
      << backend << ": the shapes no longer tell the kernels apart";
#else
  FAIL() << backend << " named in a build without OpenBLAS";
#endif
}

// Deterministic mode adds a chunk's weight gradient onto its tree sibling's only where
// accumulate_adds_rounded_product says the kernel does that bit for bit. Checked against the real thing
// on other data: accumulating must then equal the overwritten result added onto what was there, and
// must not where the probe says no. K = 4096 is split into blocks by every backend (OpenBLAS's GEMM_Q,
// Eigen's kc), so the probe is seen to say no; the bias sums are added as one sum each in any case.
TEST(GemmBackend, AccumulateProbeTellsWhetherAccumulatingAddsTheRoundedProduct) {
  struct Shape {
    Eigen::Index k, out, in;
  };
  int said_no = 0;
  for (const Shape& s : {Shape{32, 256, 784}, Shape{32, 128, 256}, Shape{32, 10, 128}, Shape{10, 64, 40},
                         Shape{64, 1024, 1024}, Shape{4096, 16, 24}}) {
    const bool probe = accumulate_adds_rounded_product(s.k, s.out, s.in);
    said_no += probe ? 0 : 1;
    const auto dy = normal_values(s.k * s.out, 51), x = normal_values(s.k * s.in, 52), w = normal_values(s.out * s.in, 53);
    const auto before_w = normal_values(s.out * s.in, 54), before_b = normal_values(s.out, 55);
    std::vector<float> alone_w(s.out * s.in), alone_b(s.out), onto_w = before_w, onto_b = before_b;
    linear_backward(cview(dy, s.k, s.out), cview(x, s.k, s.in), cview(w, s.out, s.in), view(alone_w, s.out, s.in), alone_b,
                    MatView(nullptr, 0, s.in), GradWrite::overwrite);
    linear_backward(cview(dy, s.k, s.out), cview(x, s.k, s.in), cview(w, s.out, s.in), view(onto_w, s.out, s.in), onto_b,
                    MatView(nullptr, 0, s.in), GradWrite::accumulate);
    std::vector<float> sum_w(alone_w.size()), sum_b(alone_b.size());
    for (std::size_t i = 0; i < sum_w.size(); ++i) sum_w[i] = before_w[i] + alone_w[i];
    for (std::size_t i = 0; i < sum_b.size(); ++i) sum_b[i] = before_b[i] + alone_b[i];
    EXPECT_EQ(onto_b, sum_b) << "K=" << s.k;
    if (probe)
      EXPECT_EQ(onto_w, sum_w) << "K=" << s.k << " " << s.out << "x" << s.in << ": the probe said yes";
    else
      EXPECT_NE(onto_w, sum_w) << "K=" << s.k << " " << s.out << "x" << s.in << ": the probe said no";
    std::printf("K=%ld %ldx%ld: accumulating adds the rounded product: %s\n", static_cast<long>(s.k),
                static_cast<long>(s.out), static_cast<long>(s.in), probe ? "yes" : "no");
  }
  EXPECT_GE(said_no, 1) << gemm_backend() << ": no shape split K, so the probe was not seen to say no";
}

// Deterministic mode multiplies a whole micro-batch at once only where rows_do_not_depend_on_row_count
// says each row then gets the bits it gets in a chunk's product. Checked on other data against products
// of chunk rows, for the default model's shapes at W = 1, 2, 4 and a wide layer (OpenBLAS 0.3.21 on
// Cooperlake: no for the 10-wide output layer at 256 rows; Eigen: no for chunks of 10).
TEST(GemmBackend, RowCountProbeTellsWhetherRowsKeepTheirChunksBits) {
  struct Shape {
    Eigen::Index rows, chunk, in, out;
  };
  for (const Shape& s : {Shape{256, 32, 784, 256}, Shape{128, 32, 256, 128}, Shape{64, 32, 128, 10}, Shape{256, 32, 128, 10},
                         Shape{96, 32, 1024, 1024}, Shape{240, 10, 784, 256}}) {
    const bool probe = rows_do_not_depend_on_row_count(s.rows, s.chunk, s.in, s.out);
    const auto x = normal_values(s.rows * s.in, 61), w = normal_values(s.out * s.in, 62), dy = normal_values(s.rows * s.out, 63);
    const std::vector<float> b(static_cast<std::size_t>(s.out), 0.0f);
    std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), y_parts(y.size()), dx_parts(dx.size());
    linear_forward(cview(x, s.rows, s.in), cview(w, s.out, s.in), b, view(y, s.rows, s.out));
    linear_input_grad(cview(dy, s.rows, s.out), cview(w, s.out, s.in), view(dx, s.rows, s.in));
    for (Eigen::Index r = 0; r < s.rows; r += s.chunk) {
      linear_forward(ConstMatView(x.data() + r * s.in, s.chunk, s.in), cview(w, s.out, s.in), b,
                     MatView(y_parts.data() + r * s.out, s.chunk, s.out));
      linear_input_grad(ConstMatView(dy.data() + r * s.out, s.chunk, s.out), cview(w, s.out, s.in),
                        MatView(dx_parts.data() + r * s.in, s.chunk, s.in));
    }
    const bool same = y == y_parts && dx == dx_parts;
    EXPECT_EQ(probe, same) << s.rows << " rows in chunks of " << s.chunk << ", " << s.in << " -> " << s.out;
    std::printf("%ld rows, chunks of %ld, %ld -> %ld: one product gives each row its chunk's bits: %s\n",
                static_cast<long>(s.rows), static_cast<long>(s.chunk), static_cast<long>(s.in), static_cast<long>(s.out),
                probe ? "yes" : "no");
  }
}

TEST(LayerGrad, ReluMatchesFiniteDifferencesAndWorksInPlace) {
  const Eigen::Index B = 6, C = 5;
  auto x = normal_values(B * C, 5);
  for (float& v : x) v += std::copysign(0.1f, v);  // keep every input away from the kink at 0
  const auto G = to_double(normal_values(B * C, 6));
  std::vector<float> y(B * C);
  relu_forward(cview(x, B, C), view(y, B, C));
  std::vector<float> in_place = x;
  relu_forward(cview(in_place, B, C), view(in_place, B, C));
  EXPECT_EQ(in_place, y);

  std::vector<double> xd = to_double(x);
  auto ref_forward = [&] {
    std::vector<double> out(xd.size());
    for (std::size_t i = 0; i < xd.size(); ++i) out[i] = std::max(xd[i], 0.0);
    return out;
  };
  expect_close("relu y", y, ref_forward());
  const auto want_dx = fd_gradient(xd, [&] { return weighted_sum(G, ref_forward()); });
  std::vector<float> Gf(G.begin(), G.end()), dx(B * C);
  relu_backward(cview(Gf, B, C), cview(y, B, C), view(dx, B, C));
  expect_close("relu dx", dx, want_dx);
}

TEST(LayerGrad, DropoutIsInvertedScalingAndExactZeros) {
  const Eigen::Index B = 4, C = 6;
  const double p = 0.25;
  const float scale = 1.0f / static_cast<float>(1.0 - p);
  std::vector<float> mask(B * C);
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = i % 4 == 1 ? 0.0f : scale;  // p = 1/4 dropped
  const auto x = normal_values(B * C, 7);
  const auto G = to_double(normal_values(B * C, 8));
  std::vector<float> y(B * C);
  dropout_apply(cview(x, B, C), cview(mask, B, C), view(y, B, C));
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (mask[i] == 0.0f)
      EXPECT_EQ(y[i], 0.0f) << i;
    else
      EXPECT_EQ(y[i], x[i] * scale) << i;  // exactly x / (1 - p), rounded once
  }
  std::vector<double> xd = to_double(x);
  auto ref_forward = [&] {
    std::vector<double> out(xd.size());
    for (std::size_t i = 0; i < xd.size(); ++i) out[i] = mask[i] == 0.0f ? 0.0 : xd[i] / (1.0 - p);
    return out;
  };
  const auto want_dx = fd_gradient(xd, [&] { return weighted_sum(G, ref_forward()); });
  // The engine's dropout backward is the same product, applied to dy.
  std::vector<float> Gf(G.begin(), G.end()), dx(B * C);
  dropout_apply(cview(Gf, B, C), cview(mask, B, C), view(dx, B, C));
  expect_close("dropout dx", dx, want_dx);
}

// BatchNorm1d training mode, composed as StepEngine::batchnorm_forward/backward compose the phases:
// partial sums per chunk, mean, partial squared deviations per chunk, biased variance, normalise;
// backward sums per chunk (= dbeta, dgamma), then dx with the totals over all N rows.
TEST(LayerGrad, BatchNormTrainingPhasesMatchFiniteDifferences) {
  const Eigen::Index N = 8, C = 4, chunk = 4;
  const double eps = 1e-5;
  auto x = normal_values(N * C, 9, 2.0);
  for (Eigen::Index i = 0; i < N; ++i)
    for (Eigen::Index c = 0; c < C; ++c) x[i * C + c] += 3.0f * static_cast<float>(c) - 4.0f;  // nonzero means
  auto gamma = normal_values(C, 10, 0.3), beta = normal_values(C, 11, 0.5);
  for (float& g : gamma) g += 1.0f;
  const auto G = to_double(normal_values(N * C, 12));

  auto chunk_of = [&](const std::vector<float>& m, Eigen::Index k) {
    return ConstMatView(m.data() + k * chunk * C, chunk, C);
  };
  std::vector<double> sum(C, 0.0), sqdev(C, 0.0), mean(C);
  for (Eigen::Index k = 0; k < N / chunk; ++k) bn_partial_sum(chunk_of(x, k), sum);
  for (Eigen::Index c = 0; c < C; ++c) mean[c] = sum[c] / N;
  for (Eigen::Index k = 0; k < N / chunk; ++k) bn_partial_sqdev(chunk_of(x, k), mean, sqdev);
  std::vector<float> mean_f(C), invstd_f(C), xhat(N * C), y(N * C);
  for (Eigen::Index c = 0; c < C; ++c) {
    mean_f[c] = static_cast<float>(mean[c]);
    invstd_f[c] = static_cast<float>(1.0 / std::sqrt(sqdev[c] / N + eps));
  }
  bn_normalize(cview(x, N, C), mean_f, invstd_f, gamma, beta, view(xhat, N, C), view(y, N, C));

  std::vector<double> xd = to_double(x), gd = to_double(gamma), bd = to_double(beta);
  auto ref_forward = [&] {
    std::vector<double> out(N * C);
    for (Eigen::Index c = 0; c < C; ++c) {
      double m = 0, v = 0;
      for (Eigen::Index i = 0; i < N; ++i) m += xd[i * C + c];
      m /= N;
      for (Eigen::Index i = 0; i < N; ++i) v += (xd[i * C + c] - m) * (xd[i * C + c] - m);
      v /= N;  // biased, as PyTorch normalises in training mode
      for (Eigen::Index i = 0; i < N; ++i) out[i * C + c] = gd[c] * (xd[i * C + c] - m) / std::sqrt(v + eps) + bd[c];
    }
    return out;
  };
  expect_close("batchnorm y", y, ref_forward());
  auto loss = [&] { return weighted_sum(G, ref_forward()); };
  const auto want_dx = fd_gradient(xd, loss), want_dgamma = fd_gradient(gd, loss), want_dbeta = fd_gradient(bd, loss);

  std::vector<float> Gf(G.begin(), G.end()), dx(N * C);
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for (Eigen::Index k = 0; k < N / chunk; ++k)
    bn_backward_sums(chunk_of(Gf, k), chunk_of(xhat, k), sum_dy, sum_dy_xhat);
  bn_backward_dx(cview(Gf, N, C), cview(xhat, N, C), invstd_f, gamma, sum_dy, sum_dy_xhat, static_cast<double>(N),
                 view(dx, N, C));
  expect_close("batchnorm dx", dx, want_dx);
  expect_close("batchnorm dgamma (sum dy*xhat)", std::vector<float>(sum_dy_xhat.begin(), sum_dy_xhat.end()),
               want_dgamma);
  expect_close("batchnorm dbeta (sum dy)", std::vector<float>(sum_dy.begin(), sum_dy.end()), want_dbeta);
}

TEST(LayerForward, BatchNormEvalUsesRunningStatistics) {
  const Eigen::Index N = 3, C = 4;
  const double eps = 1e-3;
  const auto x = normal_values(N * C, 13), rm = normal_values(C, 14), gamma = normal_values(C, 16),
             beta = normal_values(C, 17);
  std::vector<float> rv = normal_values(C, 15);
  for (float& v : rv) v = v * v + 0.1f;
  std::vector<float> y(N * C);
  bn_forward_eval(cview(x, N, C), rm, rv, eps, gamma, beta, view(y, N, C));
  std::vector<double> want(N * C);
  for (Eigen::Index i = 0; i < N; ++i)
    for (Eigen::Index c = 0; c < C; ++c)
      want[i * C + c] = (static_cast<double>(x[i * C + c]) - rm[c]) / std::sqrt(rv[c] + eps) * gamma[c] + beta[c];
  expect_close("batchnorm eval y", y, want);
}

TEST(LayerForward, ActivationStatsMatchDirectSums) {
  const std::vector<float> a = {1.0f, -2.0f, 3.0f, 0.5f, 4.0f, -1.5f};
  std::array<double, kStatCount> got{};
  activation_stats(cview(a, 2, 3), got);
  // mean 5/6; sum of squares 1+4+9+0.25+16+2.25 = 32.5; population std; min -2; max 4; l2 sqrt(32.5)
  const double mean = 5.0 / 6.0;
  EXPECT_DOUBLE_EQ(got[0], mean);
  EXPECT_NEAR(got[1], std::sqrt(32.5 / 6.0 - mean * mean), 1e-12);
  EXPECT_EQ(got[2], -2.0);
  EXPECT_EQ(got[3], 4.0);
  EXPECT_DOUBLE_EQ(got[4], std::sqrt(32.5));
}

TEST(Loss, UniformLogitsGiveLogClassesWithAnySmoothing) {
  const Eigen::Index B = 4, C = 5;
  const std::vector<float> logits(B * C, 1.75f);
  const std::vector<std::int32_t> labels = {0, 4, 2, 2};
  const double eps = 0.2;
  const float scale = 0.25f;
  std::vector<float> d(B * C);
  const LossSums s = cross_entropy_forward_backward(cview(logits, B, C), labels, eps, scale, view(d, B, C));
  EXPECT_NEAR(s.loss, 4 * std::log(5.0), 1e-12);
  for (Eigen::Index i = 0; i < B; ++i)
    for (Eigen::Index c = 0; c < C; ++c) {
      // p = 1/5 everywhere: dlogit = scale * (1/5 - target), target = eps/5 (+ 1 - eps on the label)
      const double target = eps / 5 + (c == labels[i] ? 1 - eps : 0.0);
      EXPECT_NEAR(d[i * C + c], scale * (0.2 - target), 1e-7) << i << "," << c;
    }
}

TEST(Loss, OneRaisedLogitMatchesClosedForm) {
  // logits (a, 0, ..., 0): -log p_0 = log(e^a + C - 1) - a, -log p_k = log(e^a + C - 1) for k > 0, so
  //   label 0: loss = log(e^a + C - 1) - (1 - eps + eps/C) a ;  label k > 0: log(e^a + C - 1) - eps/C a.
  const Eigen::Index C = 4;
  const float a = 2.5f;
  const std::vector<float> logits = {a, 0, 0, 0, a, 0, 0, 0};
  const std::vector<std::int32_t> labels = {0, 3};
  std::vector<float> d(2 * C);
  for (const double eps : {0.0, 0.1, 0.5}) {
    const LossSums s = cross_entropy_forward_backward(cview(logits, 2, C), labels, eps, 1.0f, view(d, 2, C));
    const double lse = std::log(std::exp(2.5) + 3.0);
    const double want = (lse - (1 - eps + eps / 4) * 2.5) + (lse - eps / 4 * 2.5);
    EXPECT_NEAR(s.loss, want, 1e-12) << "eps " << eps;
    EXPECT_EQ(s.correct, 1);  // row 0's argmax is its label, row 1's is not
  }
  // Huge logits must not overflow: (1000, -1000, 0), label 0 -> -log p_c = 1000 - z_c (to 1e-400).
  const std::vector<float> big = {1000.0f, -1000.0f, 0.0f};
  std::vector<float> db(3);
  const LossSums s =
      cross_entropy_forward_backward(cview(big, 1, 3), std::vector<std::int32_t>{0}, 0.1, 1.0f, view(db, 1, 3));
  EXPECT_NEAR(s.loss, 0.1 / 3 * (0 + 2000 + 1000), 1e-9);
  for (const float v : db) EXPECT_TRUE(std::isfinite(v));
}

TEST(LossGrad, SmoothedCrossEntropyMatchesFiniteDifferences) {
  const Eigen::Index B = 6, C = 7;
  const auto logits = normal_values(B * C, 18, 2.0);
  const std::vector<std::int32_t> labels = {0, 6, 3, 3, 1, 5};
  const double eps = 0.1;
  const float scale = 1.0f / 6.0f;
  std::vector<double> zd = to_double(logits);
  auto ref_loss = [&] {
    double s = 0;
    for (Eigen::Index i = 0; i < B; ++i)
      s += reference_row_loss(std::span<const double>(zd.data() + i * C, C), labels[i], eps);
    return s;
  };
  std::vector<float> d(B * C);
  const LossSums s = cross_entropy_forward_backward(cview(logits, B, C), labels, eps, scale, view(d, B, C));
  EXPECT_NEAR(s.loss, ref_loss(), 1e-12 * ref_loss());
  auto want = fd_gradient(zd, ref_loss);
  for (double& v : want) v *= static_cast<double>(scale);
  expect_close("cross-entropy dlogits", d, want);

  std::int64_t correct = 0;
  for (Eigen::Index i = 0; i < B; ++i) {
    const float* row = logits.data() + i * C;
    correct += std::max_element(row, row + C) - row == labels[i];
  }
  EXPECT_EQ(s.correct, correct);
  // Evaluation is the unsmoothed loss with the same accuracy count.
  const LossSums e = cross_entropy_eval(cview(logits, B, C), labels);
  const LossSums plain = cross_entropy_forward_backward(cview(logits, B, C), labels, 0.0, 1.0f, view(d, B, C));
  EXPECT_DOUBLE_EQ(e.loss, plain.loss);
  EXPECT_EQ(e.correct, correct);
}

TEST(LossGrad, AsymmetricLossMatchesFiniteDifferences) {
  // ASL over one-hot targets, from its definition with p = sigmoid(z), p_m = max(p - margin, 0):
  //   label: -(1 - p)^gamma_pos log p ;  other classes: -p_m^gamma_neg log(1 - p_m)
  const Eigen::Index B = 5, C = 4;
  const auto logits = normal_values(B * C, 19, 2.0);
  const std::vector<std::int32_t> labels = {1, 0, 3, 2, 1};
  LossParams asl;
  asl.asl = true;
  asl.gamma_pos = 1.0;
  asl.gamma_neg = 4.0;
  asl.margin = 0.05;
  for (const float z : logits)  // the finite differences must not straddle the margin's kink
    ASSERT_GT(std::abs(1.0 / (1.0 + std::exp(-static_cast<double>(z))) - asl.margin), 1e-3);
  std::vector<double> zd = to_double(logits);
  auto ref_loss = [&] {
    double s = 0;
    for (Eigen::Index i = 0; i < B; ++i)
      for (Eigen::Index c = 0; c < C; ++c) {
        const double p = 1.0 / (1.0 + std::exp(-zd[i * C + c]));
        if (c == labels[i]) {
          s -= std::pow(1 - p, asl.gamma_pos) * std::log(p);
        } else {
          const double pm = std::max(p - asl.margin, 0.0);
          s -= std::pow(pm, asl.gamma_neg) * std::log(1 - pm);
        }
      }
    return s;
  };
  const float scale = 0.5f;
  std::vector<float> d(B * C);
  const LossSums s = loss_forward_backward(cview(logits, B, C), labels, asl, scale, view(d, B, C));
  EXPECT_NEAR(s.loss, ref_loss(), 1e-12 * ref_loss());
  auto want = fd_gradient(zd, ref_loss);
  for (double& v : want) v *= static_cast<double>(scale);
  expect_close("asl dlogits", d, want);

  // With asl off, the dispatcher is the label-smoothed cross-entropy.
  LossParams ce;
  ce.label_smoothing = 0.1;
  std::vector<float> d_ce(B * C);
  const LossSums a = loss_forward_backward(cview(logits, B, C), labels, ce, scale, view(d, B, C));
  const LossSums b = cross_entropy_forward_backward(cview(logits, B, C), labels, 0.1, scale, view(d_ce, B, C));
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(d, d_ce);
}

TEST(MlpLayout, PyTorchSequentialNamesShapesAndOffsets) {
  const Mlp m(model_cfg({7, 5}, true, 0.1), 12, 3);
  std::vector<std::string> layer_names;
  for (const Layer& l : m.layers()) layer_names.push_back(l.name);
  EXPECT_EQ(layer_names,
            (std::vector<std::string>{"fc1", "bn1", "relu1", "drop1", "fc2", "bn2", "relu2", "drop2", "fc3"}));
  for (std::size_t i = 0; i < m.layers().size(); ++i) EXPECT_EQ(m.layers()[i].index, i);

  struct Want {
    const char* name;
    std::vector<std::int64_t> shape;
    std::size_t layer_index;
  };
  const std::vector<Want> want = {
      {"fc1.weight", {7, 12}, 0}, {"fc1.bias", {7}, 0}, {"bn1.weight", {7}, 1}, {"bn1.bias", {7}, 1},
      {"fc2.weight", {5, 7}, 4},  {"fc2.bias", {5}, 4}, {"bn2.weight", {5}, 5}, {"bn2.bias", {5}, 5},
      {"fc3.weight", {3, 5}, 8},  {"fc3.bias", {3}, 8},
  };
  ASSERT_EQ(m.tensors().size(), want.size());
  std::size_t offset = 0;
  for (std::size_t t = 0; t < want.size(); ++t) {
    const ParamTensor& p = m.tensors()[t];
    EXPECT_EQ(p.layer + "." + p.name, want[t].name);
    EXPECT_EQ(p.shape, want[t].shape) << want[t].name;
    EXPECT_EQ(p.layer_index, want[t].layer_index) << want[t].name;
    EXPECT_EQ(p.offset, offset) << want[t].name;  // contiguous, in registration order
    offset += p.size;
  }
  EXPECT_EQ(m.num_params(), offset);
  EXPECT_EQ(m.num_params(), 12u * 7 + 7 + 14 + 7 * 5 + 5 + 10 + 5 * 3 + 3);
  EXPECT_EQ(m.max_width(), 12);

  // Layers point at their tensors; BN running statistics tile the buffer without overlap.
  const Layer& fc2 = m.layers()[4];
  EXPECT_EQ(fc2.in, 7);
  EXPECT_EQ(fc2.out, 5);
  EXPECT_EQ(fc2.weight, m.tensors()[4].offset);
  EXPECT_EQ(fc2.bias, m.tensors()[5].offset);
  EXPECT_EQ(m.num_buffers(), 2u * (7 + 5));
  const Layer &bn1 = m.layers()[1], &bn2 = m.layers()[5];
  EXPECT_EQ(bn1.weight, m.tensors()[2].offset);
  EXPECT_EQ(bn1.running_mean, 0u);
  EXPECT_EQ(bn1.running_var, 7u);
  EXPECT_EQ(bn2.running_mean, 14u);
  EXPECT_EQ(bn2.running_var, 19u);

  const Mlp plain(model_cfg({7, 5}, false, 0.0), 12, 3);
  layer_names.clear();
  for (const Layer& l : plain.layers()) layer_names.push_back(l.name);
  EXPECT_EQ(layer_names, (std::vector<std::string>{"fc1", "relu1", "fc2", "relu2", "fc3"}));
  EXPECT_EQ(plain.num_buffers(), 0u);
  const Mlp logistic(model_cfg({}, false, 0.0), 12, 3);
  ASSERT_EQ(logistic.layers().size(), 1u);
  EXPECT_EQ(logistic.tensors()[0].shape, (std::vector<std::int64_t>{3, 12}));
}

TEST(MlpInit, UniformWithinFanInBoundAndBatchNormIdentity) {
  const Mlp m(model_cfg({256, 64}, true, 0.0), 784, 10);
  std::vector<float> p(m.num_params(), std::numeric_limits<float>::quiet_NaN());
  m.init_parameters(p, 42);
  for (const ParamTensor& t : m.tensors()) {
    const std::span<const float> v(p.data() + t.offset, t.size);
    if (t.layer.starts_with("bn")) {
      const float want = t.name == "weight" ? 1.0f : 0.0f;
      for (const float x : v) ASSERT_EQ(x, want) << t.layer << "." << t.name;
      continue;
    }
    const std::int64_t fan_in = m.layers()[t.layer_index].in;  // bias shares the weight's bound
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    double sum = 0, sum2 = 0, top = 0;
    for (const float x : v) {
      ASSERT_LE(std::abs(x), bound) << t.layer << "." << t.name;
      sum += x;
      sum2 += static_cast<double>(x) * x;
      top = std::max(top, static_cast<double>(std::abs(x)));
    }
    const double n = static_cast<double>(t.size), mean = sum / n, var = sum2 / n - mean * mean;
    // U(-b, b): mean 0 with std b/sqrt(3n); variance b^2/3 with relative std 0.894/sqrt(n). 5 sigma each.
    EXPECT_LE(std::abs(mean), 5 * bound / std::sqrt(3 * n)) << t.layer << "." << t.name;
    EXPECT_NEAR(var, bound * bound / 3, 5 * 0.894 / std::sqrt(n) * bound * bound / 3) << t.layer << "." << t.name;
    if (t.size >= 100) {
      EXPECT_GT(top, 0.95 * bound) << t.layer << "." << t.name << ": draws span the whole range";
    }
  }
  std::vector<float> buffers(m.num_buffers(), std::numeric_limits<float>::quiet_NaN());
  m.init_buffers(buffers);
  for (const Layer& l : m.layers()) {
    if (l.kind != LayerKind::batchnorm) continue;
    for (std::int64_t i = 0; i < l.out; ++i) {
      EXPECT_EQ(buffers[l.running_mean + static_cast<std::size_t>(i)], 0.0f);
      EXPECT_EQ(buffers[l.running_var + static_cast<std::size_t>(i)], 1.0f);
    }
  }
}

TEST(MlpInit, KeyedPerTensorAndBySeed) {
  // Same input and classes; `wider` changes the second hidden width, `wider_first` the first one.
  const ModelSection base = model_cfg({16, 8}, false, 0.0);
  const Mlp a(base, 20, 4), wider(model_cfg({16, 12}, false, 0.0), 20, 4),
      wider_first(model_cfg({24, 8}, false, 0.0), 20, 4);
  auto init = [](const Mlp& m, std::uint64_t seed) {
    std::vector<float> p(m.num_params());
    m.init_parameters(p, seed);
    return p;
  };
  auto tensor = [](const Mlp& m, const std::vector<float>& p, std::size_t t) {
    const ParamTensor& pt = m.tensors()[t];
    return std::vector<float>(p.begin() + static_cast<std::ptrdiff_t>(pt.offset),
                              p.begin() + static_cast<std::ptrdiff_t>(pt.offset + pt.size));
  };
  const auto pa = init(a, 7), pw = init(wider, 7), pf = init(wider_first, 7), other = init(a, 8);
  EXPECT_EQ(pa, init(a, 7));
  // fc1.weight / fc1.bias do not notice a later width change.
  EXPECT_EQ(tensor(a, pa, 0), tensor(wider, pw, 0));
  EXPECT_EQ(tensor(a, pa, 1), tensor(wider, pw, 1));
  // fc3 ([4, 8], fan-in 8) keeps its values when an *earlier* tensor grows: a single sequential stream
  // would shift them.
  ASSERT_EQ(a.tensors()[4].layer + "." + a.tensors()[4].name, "fc3.weight");
  EXPECT_EQ(tensor(a, pa, 4), tensor(wider_first, pf, 4));
  EXPECT_EQ(tensor(a, pa, 5), tensor(wider_first, pf, 5));
  EXPECT_NE(tensor(a, pa, 0), tensor(a, pa, 2)) << "different tensors draw different numbers";
  int same = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) same += pa[i] == other[i];
  EXPECT_LT(same, 3) << "another seed gives other values";
}
