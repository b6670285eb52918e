// Unit tests of src/model outside the layer styles (those are in layers/, against torch): the GEMM
// backend and its probes, activation statistics, the losses' (label-smoothed cross-entropy, ASL) backward
// against central finite differences of an independent double-precision forward and against closed
// forms, and the mlp model's parameter layout and initialisation. Each gradient check prints the largest
// error it saw ("max abs err ... OK").
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
#include "model/activation_stats.hpp"
#include "model/loss.hpp"
#include "model/layer.hpp"
#include "model/model.hpp"
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

// The linear style's parameter gradients [weight | bias] for dy (k rows) and x, written onto `grads`
// (empty: a fresh buffer) as `write` says.
std::vector<float> linear_param_grads(Eigen::Index k, Eigen::Index out, Eigen::Index in, const std::vector<float>& dy,
                                      const std::vector<float>& x, std::vector<float> grads, GradWrite write) {
  const auto layer = make_layer({"linear", "fc", {{in}}, {{"out", static_cast<double>(out)}}});
  layer->place(0, {0, static_cast<std::size_t>(out * in)}, {});
  grads.resize(static_cast<std::size_t>(out * in + out));
  const OperandRounding fp32(MatmulFormat::fp32, {});
  Pass p;
  p.rows = k;
  p.x[0] = x.data();
  p.dy = dy.data();
  p.grads = grads.data();
  p.write = write;
  p.round = &fp32;
  layer->backward_params(p);
  return grads;
}

// The linear style with weights w and a zero bias, run over `rows` rows.
struct LinearStyle {
  LinearStyle(Eigen::Index in, Eigen::Index out, const std::vector<float>& w)
      : layer(make_layer({"linear", "fc", {{in}}, {{"out", static_cast<double>(out)}}})), params(w) {
    params.resize(static_cast<std::size_t>(out * in + out), 0.0f);
    layer->place(0, {0, static_cast<std::size_t>(out * in)}, {});
  }
  Pass pass(Eigen::Index rows) const {
    Pass p;
    p.rows = rows;
    p.params = params.data();
    p.round = &fp32;
    return p;
  }
  void forward(Eigen::Index rows, const float* x, float* y) const {
    Pass p = pass(rows);
    p.x[0] = x;
    p.y = y;
    layer->forward(p);
  }
  void input_grad(Eigen::Index rows, const float* dy, float* dx) const {
    Pass p = pass(rows);
    p.dy = dy;
    p.dx[0] = dx;
    layer->backward_input(p);
  }
  std::unique_ptr<Layer> layer;
  std::vector<float> params;
  OperandRounding fp32{MatmulFormat::fp32, {}};
};

ModelSection model_cfg(std::vector<std::int64_t> hidden, bool batchnorm, double dropout) {
  ModelSection c;
  c.type = "mlp";
  c.hidden = std::move(hidden);
  c.batchnorm = batchnorm;
  c.dropout = dropout;
  return c;
}

}  // namespace

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
    const auto dy = normal_values(s.k * s.out, 51), x = normal_values(s.k * s.in, 52);
    const auto before_w = normal_values(s.out * s.in, 54), before_b = normal_values(s.out, 55);
    const std::vector<float> alone = linear_param_grads(s.k, s.out, s.in, dy, x, {}, GradWrite::overwrite);
    std::vector<float> before = before_w;
    before.insert(before.end(), before_b.begin(), before_b.end());
    const std::vector<float> onto = linear_param_grads(s.k, s.out, s.in, dy, x, before, GradWrite::accumulate);
    const auto nw = static_cast<std::ptrdiff_t>(s.out * s.in);
    const std::vector<float> onto_w(onto.begin(), onto.begin() + nw), onto_b(onto.begin() + nw, onto.end());
    std::vector<float> sum_w(before_w.size()), sum_b(before_b.size());
    for (std::size_t i = 0; i < sum_w.size(); ++i) sum_w[i] = before_w[i] + alone[i];
    for (std::size_t i = 0; i < sum_b.size(); ++i) sum_b[i] = before_b[i] + alone[sum_w.size() + i];
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
    const LinearStyle fc(s.in, s.out, w);
    std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), y_parts(y.size()), dx_parts(dx.size());
    fc.forward(s.rows, x.data(), y.data());
    fc.input_grad(s.rows, dy.data(), dx.data());
    for (Eigen::Index r = 0; r < s.rows; r += s.chunk) {
      fc.forward(s.chunk, x.data() + r * s.in, y_parts.data() + r * s.out);
      fc.input_grad(s.chunk, dy.data() + r * s.out, dx_parts.data() + r * s.in);
    }
    const bool same = y == y_parts && dx == dx_parts;
    EXPECT_EQ(probe, same) << s.rows << " rows in chunks of " << s.chunk << ", " << s.in << " -> " << s.out;
    std::printf("%ld rows, chunks of %ld, %ld -> %ld: one product gives each row its chunk's bits: %s\n",
                static_cast<long>(s.rows), static_cast<long>(s.chunk), static_cast<long>(s.in), static_cast<long>(s.out),
                probe ? "yes" : "no");
  }
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

TEST(ModelMlp, PyTorchSequentialNamesShapesAndOffsets) {
  const Model m(model_cfg({7, 5}, true, 0.1), {12}, 3);
  std::vector<std::string> layer_names;
  for (const Node& n : m.nodes()) layer_names.push_back(n.layer->name());
  EXPECT_EQ(layer_names,
            (std::vector<std::string>{"fc1", "bn1", "relu1", "drop1", "fc2", "bn2", "relu2", "drop2", "fc3"}));
  for (std::size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m.layer(i).index(), i);  // keys dropout masks: a moved layer would change every mlp trajectory
    EXPECT_EQ(m.nodes()[i].inputs, std::vector<int>{static_cast<int>(i)}) << "a chain";
  }

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
  EXPECT_EQ(m.activation_floats(), 12 + 4 * 7 + 4 * 5 + 3);

  // Layers point at their tensors; BN running statistics tile the buffer without overlap.
  const Layer& fc2 = m.layer(4);
  EXPECT_EQ(fc2.in_features(), 7);
  EXPECT_EQ(fc2.out_features(), 5);
  EXPECT_EQ(fc2.param(0), m.tensors()[4].offset);
  EXPECT_EQ(fc2.param(1), m.tensors()[5].offset);
  EXPECT_EQ(m.num_buffers(), 2u * (7 + 5));
  const Layer &bn1 = m.layer(1), &bn2 = m.layer(5);
  EXPECT_EQ(bn1.param(0), m.tensors()[2].offset);
  EXPECT_EQ(bn1.buffer(0), 0u);
  EXPECT_EQ(bn1.buffer(1), 7u);
  EXPECT_EQ(bn2.buffer(0), 14u);
  EXPECT_EQ(bn2.buffer(1), 19u);
  EXPECT_TRUE(m.has_batch_statistics());

  const Model plain(model_cfg({7, 5}, false, 0.0), {12}, 3);
  layer_names.clear();
  for (const Node& n : plain.nodes()) layer_names.push_back(n.layer->name());
  EXPECT_EQ(layer_names, (std::vector<std::string>{"fc1", "relu1", "fc2", "relu2", "fc3"}));
  EXPECT_EQ(plain.num_buffers(), 0u);
  EXPECT_FALSE(plain.has_batch_statistics());
  const Model logistic(model_cfg({}, false, 0.0), {12}, 3);
  ASSERT_EQ(logistic.size(), 1u);
  EXPECT_EQ(logistic.tensors()[0].shape, (std::vector<std::int64_t>{3, 12}));
  // Image input: the mlp reads it flat.
  const Model images(model_cfg({7}, false, 0.0), {1, 4, 3}, 3);
  EXPECT_EQ(images.tensors()[0].shape, (std::vector<std::int64_t>{7, 12}));
}

TEST(ModelMlp, UniformWithinFanInBoundAndBatchNormIdentity) {
  const Model m(model_cfg({256, 64}, true, 0.0), {784}, 10);
  std::vector<float> p(m.num_params(), std::numeric_limits<float>::quiet_NaN());
  m.init_parameters(p, 42);
  for (const ParamTensor& t : m.tensors()) {
    const std::span<const float> v(p.data() + t.offset, t.size);
    if (t.layer.starts_with("bn")) {
      const float want = t.name == "weight" ? 1.0f : 0.0f;
      for (const float x : v) ASSERT_EQ(x, want) << t.layer << "." << t.name;
      continue;
    }
    const std::int64_t fan_in = m.layer(t.layer_index).in_features();  // bias shares the weight's bound
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
  for (const Node& n : m.nodes()) {
    if (!n.layer->statistics()) continue;
    for (std::int64_t i = 0; i < n.layer->out_features(); ++i) {
      EXPECT_EQ(buffers[n.layer->buffer(0) + static_cast<std::size_t>(i)], 0.0f);
      EXPECT_EQ(buffers[n.layer->buffer(1) + static_cast<std::size_t>(i)], 1.0f);
    }
  }
}

TEST(ModelMlp, KeyedPerTensorAndBySeed) {
  // Same input and classes; `wider` changes the second hidden width, `wider_first` the first one.
  const ModelSection base = model_cfg({16, 8}, false, 0.0);
  const Model a(base, {20}, 4), wider(model_cfg({16, 12}, false, 0.0), {20}, 4),
      wider_first(model_cfg({24, 8}, false, 0.0), {20}, 4);
  auto init = [](const Model& m, std::uint64_t seed) {
    std::vector<float> p(m.num_params());
    m.init_parameters(p, seed);
    return p;
  };
  auto tensor = [](const Model& m, const std::vector<float>& p, std::size_t t) {
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
