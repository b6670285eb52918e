// The GPU twins (kernels/layers_gpu.hpp, loss_gpu.hpp, philox.cuh) against the CPU reference functions
// of src/model and src/numerics on the same inputs.
//
// Bitwise where the twin performs the same operations in the same order (Philox draws, dropout masks,
// bf16/fp16 rounding, ReLU, bias gradients, BatchNorm sums of x and dy). Elsewhere a tolerance relative
// to the largest reference value: 1e-5 for float results that go through a GEMM (cuBLAS sums in another
// order than Eigen: a few float roundings of the largest term, ~1e-6), 1e-6 for elementwise float
// formulas (fused multiply-adds may differ), 1e-12 for double sums.
// The Philox arithmetic is also checked on the host build of the twin, which needs no GPU.
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "config/run_config.hpp"
#include "gpu_test_support.hpp"
#include "layers_gpu.hpp"
#include "loss_gpu.hpp"
#include "layer_bench.hpp"
#include "model/loss.hpp"
#include "numerics/bits.hpp"
#include "philox.cuh"

using namespace divsim;
using gputest::expect_bitwise;
using gputest::expect_close;
using gputest::normal_values;
using gputest::to_device;
using gputest::to_host;

namespace {

// Row-major views for the CPU functions: read-only inputs, read-write outputs.
ConstMatView ro(const std::vector<float>& v, Eigen::Index rows, Eigen::Index cols) {
  return ConstMatView(v.data(), rows, cols);
}
MatView rw(std::vector<float>& v, Eigen::Index rows, Eigen::Index cols) { return MatView(v.data(), rows, cols); }

}  // namespace

TEST(GpuPhilox, HostBuildOfTheTwinEqualsTheCpuGenerator) {
  const std::uint64_t seeds[] = {0, 1, 0x123456789abcdefull, ~0ull};
  for (const std::uint64_t seed : seeds)
    for (std::uint32_t w = 0; w < 50; ++w) {
      // Raw blocks: counter and key words spread over their range.
      const PhiloxCounter c{w * 0x9E3779B9u, w, ~w, w << 16};
      const PhiloxKey k{static_cast<std::uint32_t>(seed) ^ w, static_cast<std::uint32_t>(seed >> 32)};
      const PhiloxCounter want = philox4x32_10(c, k);
      const gpu::PhiloxWords got = gpu::philox4x32_10({{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
      for (int i = 0; i < 4; ++i) ASSERT_EQ(got.v[i], want[i]) << "seed " << seed << " w " << w;
      // KeyedStream::fill_uniform through the twin's key and block layout.
      std::vector<float> cpu(11);
      KeyedStream(seed, Stream::dropout, w, 1000 + w, 3).fill_uniform(cpu);
      const gpu::StreamKey key = gpu::stream_key(seed, static_cast<std::uint32_t>(Stream::dropout));
      for (std::uint32_t j = 0; j < cpu.size(); ++j) {
        const gpu::PhiloxWords words = gpu::fill_uniform_block(key, j / 4, w, 1000 + w, 3);
        ASSERT_EQ(gpu::uniform_from_word(words.v[j % 4]), cpu[j]) << "seed " << seed << " draw " << j;
      }
    }
}

TEST(GpuLayers, DropoutDrawsAndMasksEqualTheCpuBitwise) {
  DIVSIM_REQUIRE_GPU();
  const int rows = 6, cols = 13;  // 13: the last Philox block of a row is partly used
  const std::uint64_t seed = 0xfeedface12345678ull;
  const std::uint32_t step = 77, layer = 4;
  const std::vector<std::int64_t> samples = {0, 5, 59999, 123456789012, 7, 5};
  std::vector<float> want(rows * cols);
  for (int i = 0; i < rows; ++i)
    KeyedStream(seed, Stream::dropout, step, static_cast<std::uint32_t>(samples[i]), layer)
        .fill_uniform(std::span<float>(want.data() + i * cols, cols));
  const auto d_samples = to_device(samples);
  gpu::DeviceBuffer<float> d_mask(want.size());
  gpu::keyed_uniform_rows(seed, static_cast<std::uint32_t>(Stream::dropout), step, d_samples.data(), layer, rows, cols,
                          d_mask.data(), nullptr);
  expect_bitwise("uniform draws", to_host(d_mask), want);

  const float keep = static_cast<float>(1.0 - 0.3), scale = 1.0f / keep;
  for (float& m : want) m = m < keep ? scale : 0.0f;
  gpu::dropout_mask(d_mask.data(), want.size(), keep, scale, nullptr);
  expect_bitwise("masks", to_host(d_mask), want);

  const std::vector<float> x = normal_values(want.size(), 1);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i] * want[i];  // the dropout style's product
  const auto d_x = to_device(x);
  gpu::DeviceBuffer<float> d_y(x.size());
  gpu::dropout_apply(d_x.data(), d_mask.data(), d_y.data(), x.size(), nullptr);
  expect_bitwise("dropout_apply", to_host(d_y), y);
}

TEST(GpuLayers, Bf16AndFp16RoundingEqualTheCpuEmulationBitwise) {
  DIVSIM_REQUIRE_GPU();
  std::vector<float> x = normal_values(4000, 2, 100.0);
  // Edge cases: ties, fp16 overflow and subnormals, zeros, infinities.
  const float edges[] = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, 65519.0f, 65520.0f, 1e6f, -1e6f, 1e-6f, 3e-8f, -0.0f,
                         0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::denorm_min(), 3.4e38f};
  x.insert(x.end(), std::begin(edges), std::end(edges));
  const auto d_x = to_device(x);
  gpu::DeviceBuffer<float> d_y(x.size());
  for (const MatmulFormat f : {MatmulFormat::bf16, MatmulFormat::fp16}) {
    std::vector<float> want = x;
    round_to_format(want, f);
    gpu::round_to_format(d_x.data(), d_y.data(), x.size(), f, nullptr);
    expect_bitwise("round to " + std::string(name_of(f)), to_host(d_y), want);
  }
  EXPECT_THROW(gpu::round_to_format(d_x.data(), d_y.data(), x.size(), MatmulFormat::tf32, nullptr),
               std::invalid_argument);
}

TEST(GpuLayers, LinearMatchesTheCpuInPedanticFp32) {
  DIVSIM_REQUIRE_GPU();
  const int rows = 37, in = 50, out = 23;  // odd sizes: no multiple of a tile
  const std::vector<float> x = normal_values(rows * in, 3), w = normal_values(out * in, 4, 0.1),
                           b = normal_values(out, 5), dy = normal_values(rows * out, 6);
  std::vector<float> dw = normal_values(out * in, 7), db = normal_values(out, 8);  // backward accumulates
  const auto d_x = to_device(x), d_w = to_device(w), d_b = to_device(b), d_dy = to_device(dy);
  auto d_dw = to_device(dw), d_db = to_device(db);
  gpu::DeviceBuffer<float> d_y(rows * out), d_dx(rows * in);

  test::LayerBench cpu({"linear", "fc", {{in}}, {{"out", out}}}, rows);
  cpu.x[0] = x;
  cpu.dy = dy;
  std::copy(w.begin(), w.end(), cpu.params.begin());
  std::copy(b.begin(), b.end(), cpu.params.begin() + out * in);
  std::copy(dw.begin(), dw.end(), cpu.grads.begin());
  std::copy(db.begin(), db.end(), cpu.grads.begin() + out * in);
  cpu.forward();
  cpu.backward(GradWrite::accumulate);
  const std::vector<float>& y = cpu.y;
  const std::vector<float>& dx = cpu.dx[0];
  dw.assign(cpu.grads.begin(), cpu.grads.begin() + out * in);
  db.assign(cpu.grads.begin() + out * in, cpu.grads.end());
  gpu::BlasHandle handle(nullptr);
  const gpu::Blas blas{handle.get(), nullptr, gpu::GemmMath::fp32_pedantic};
  gpu::linear_forward(blas, d_x.data(), d_w.data(), d_b.data(), rows, in, out, d_y.data());
  gpu::linear_backward(blas, d_dy.data(), d_x.data(), d_w.data(), rows, in, out, d_dw.data(), d_db.data(), d_dx.data());
  expect_close("linear y", to_host(d_y), y, 1e-5);
  expect_close("linear dw (accumulated)", to_host(d_dw), dw, 1e-5);
  expect_close("linear dx", to_host(d_dx), dx, 1e-5);
  expect_bitwise("linear db (rows in order)", to_host(d_db), db);
}

TEST(GpuLayers, Tf32GemmDiffersFromFp32LikeTheEmulation) {
  DIVSIM_REQUIRE_GPU();
  // Large enough for tensor-core kernels. TF32 keeps 10 mantissa bits: relative input error ~2^-11.
  const int rows = 128, in = 256, out = 128;
  const std::vector<float> x = normal_values(rows * in, 9), w = normal_values(out * in, 10, 0.06),
                           b(out, 0.0f);
  test::LayerBench cpu({"linear", "fc", {{in}}, {{"out", out}}}, rows);
  cpu.x[0] = x;
  std::copy(w.begin(), w.end(), cpu.params.begin());
  std::fill(cpu.params.begin() + out * in, cpu.params.end(), 0.0f);
  cpu.forward();
  const std::vector<float> exact = cpu.y;
  cpu.format = MatmulFormat::tf32;  // the CPU's emulation: operands rounded to 10 mantissa bits
  cpu.forward();
  const std::vector<float> emulated = cpu.y;

  const auto d_x = to_device(x), d_w = to_device(w), d_b = to_device(b);
  gpu::DeviceBuffer<float> d_y(exact.size());
  gpu::BlasHandle handle(nullptr);
  gpu::linear_forward({handle.get(), nullptr, gpu::GemmMath::tf32}, d_x.data(), d_w.data(), d_b.data(), rows, in, out,
                      d_y.data());
  const std::vector<float> tf32 = to_host(d_y);
  double hw = 0.0, emu = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    hw = std::max(hw, std::abs(double{tf32[i]} - exact[i]));
    emu = std::max(emu, std::abs(double{emulated[i]} - exact[i]));
    ref = std::max(ref, std::abs(double{exact[i]}));
  }
  std::printf("  TF32 vs FP32, max abs err relative to max |y|: GPU tensor cores %.3e, CPU emulation %.3e\n",
              hw / ref, emu / ref);
  EXPECT_GT(hw / ref, 1e-5) << "the TF32 GEMM looks like FP32: tensor-core TF32 was not used";
  EXPECT_GT(hw, 0.1 * emu);
  EXPECT_LT(hw, 10.0 * emu);
}

TEST(GpuLayers, ReluMatchesTheCpuBitwise) {
  DIVSIM_REQUIRE_GPU();
  const int rows = 9, cols = 31;
  const std::vector<float> x = normal_values(rows * cols, 11), dy = normal_values(rows * cols, 12);
  test::LayerBench cpu({"relu", "relu", {{cols}}, {}}, rows);
  cpu.x[0] = x;
  cpu.dy = dy;
  cpu.forward();
  cpu.backward(GradWrite::overwrite);
  const std::vector<float>& y = cpu.y;
  const std::vector<float>& dx = cpu.dx[0];
  const auto d_x = to_device(x), d_dy = to_device(dy);
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
  gpu::relu_forward(d_x.data(), d_y.data(), x.size(), nullptr);
  gpu::relu_backward(d_dy.data(), d_y.data(), d_dx.data(), x.size(), nullptr);
  expect_bitwise("relu y", to_host(d_y), y);
  expect_bitwise("relu dx", to_host(d_dx), dx);
}

TEST(GpuLayers, BatchNormMatchesTheCpu) {
  DIVSIM_REQUIRE_GPU();
  const int rows = 40, cols = 17;
  const std::size_t n = cols;
  std::vector<float> x = normal_values(rows * cols, 13, 3.0);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>(i % n);  // per-feature offsets
  const std::vector<float> dy = normal_values(x.size(), 16);
  // The CPU style in one chunk: its phase totals, saved (xhat, mean, invstd), output and gradients.
  test::LayerBench cpu({"batchnorm1d", "bn", {{cols}}, {{"eps", 1e-5}}}, rows);
  cpu.x[0] = x;
  cpu.dy = dy;
  const std::vector<float> gamma(cpu.params.begin(), cpu.params.begin() + cols), beta(cpu.params.begin() + cols, cpu.params.end());
  const std::vector<float> dgamma0 = normal_values(n, 17), dbeta0 = normal_values(n, 18);  // backward accumulates
  std::copy(dgamma0.begin(), dgamma0.end(), cpu.grads.begin());
  std::copy(dbeta0.begin(), dbeta0.end(), cpu.grads.begin() + cols);
  cpu.forward();
  cpu.backward(GradWrite::accumulate);
  const auto d_x = to_device(x), d_gamma = to_device(gamma), d_beta = to_device(beta), d_dy = to_device(dy);

  // Statistics: sums bitwise, squared deviations to double precision.
  const std::vector<double> sum(cpu.forward_totals.begin(), cpu.forward_totals.begin() + cols),
      sqdev(cpu.forward_totals.begin() + cols, cpu.forward_totals.end());
  std::vector<double> mean(n);
  for (std::size_t c = 0; c < n; ++c) mean[c] = sum[c] / rows;
  gpu::DeviceBuffer<double> d_sum(n), d_sqdev(n);
  const auto d_mean = to_device(mean);
  gpu::bn_partial_sum(d_x.data(), rows, cols, d_sum.data(), nullptr);
  gpu::bn_partial_sqdev(d_x.data(), rows, cols, d_mean.data(), d_sqdev.data(), nullptr);
  expect_bitwise("bn sum", to_host(d_sum), sum);
  expect_close("bn sqdev", to_host(d_sqdev), sqdev, 1e-12);

  const std::vector<float>& xhat = cpu.saved[0];
  const std::vector<float>& meanf = cpu.saved[1];
  const std::vector<float>& invstd = cpu.saved[2];
  const auto d_meanf = to_device(meanf), d_invstd = to_device(invstd);
  gpu::DeviceBuffer<float> d_xhat(x.size()), d_y(x.size());
  gpu::bn_normalize(d_x.data(), rows, cols, d_meanf.data(), d_invstd.data(), d_gamma.data(), d_beta.data(),
                    d_xhat.data(), d_y.data(), nullptr);
  expect_close("bn xhat", to_host(d_xhat), xhat, 1e-6);
  expect_close("bn y", to_host(d_y), cpu.y, 1e-6);

  // Backward: the kernel takes the CPU's xhat, so its sums must be bitwise those of the CPU.
  const auto d_xhat_cpu = to_device(xhat);
  auto d_dgamma = to_device(dgamma0), d_dbeta = to_device(dbeta0);
  gpu::DeviceBuffer<double> d_sums(2 * n);
  gpu::bn_backward_sums(d_dy.data(), d_xhat_cpu.data(), rows, cols, d_sums.data(), d_sums.data() + n,
                        d_dgamma.data(), d_dbeta.data(), nullptr);
  expect_bitwise("bn [sum dy | sum dy*xhat]", to_host(d_sums), cpu.backward_totals);
  expect_bitwise("bn dgamma (accumulated)", to_host(d_dgamma),
                 std::vector<float>(cpu.grads.begin(), cpu.grads.begin() + cols));
  expect_bitwise("bn dbeta (accumulated)", to_host(d_dbeta), std::vector<float>(cpu.grads.begin() + cols, cpu.grads.end()));

  gpu::DeviceBuffer<float> d_dx(x.size());
  gpu::bn_backward_dx(d_dy.data(), d_xhat_cpu.data(), rows, cols, d_invstd.data(), d_gamma.data(), d_sums.data(),
                      d_sums.data() + n, rows, d_dx.data(), nullptr);
  expect_close("bn dx", to_host(d_dx), cpu.dx[0], 1e-6);

  // Eval mode with running statistics.
  std::vector<float> running_mean = normal_values(n, 19), running_var(n);
  for (std::size_t c = 0; c < n; ++c) running_var[c] = 0.5f + static_cast<float>(c);
  std::copy(running_mean.begin(), running_mean.end(), cpu.buffers.begin());
  std::copy(running_var.begin(), running_var.end(), cpu.buffers.begin() + cols);
  std::vector<float> y_eval;
  cpu.forward_eval(y_eval);
  const auto d_rm = to_device(running_mean), d_rv = to_device(running_var);
  gpu::bn_forward_eval(d_x.data(), rows, cols, d_rm.data(), d_rv.data(), 1e-5, d_gamma.data(), d_beta.data(),
                       d_y.data(), nullptr);
  expect_close("bn eval y", to_host(d_y), y_eval, 1e-6);
}

TEST(GpuLoss, CrossEntropyAslAndEvalMatchTheCpu) {
  DIVSIM_REQUIRE_GPU();
  const int rows = 50, classes = 10;
  const std::vector<float> logits = normal_values(rows * classes, 20, 3.0);
  std::vector<std::int32_t> labels(rows);
  for (int i = 0; i < rows; ++i) labels[i] = (i * 7) % classes;
  const auto d_logits = to_device(logits);
  const auto d_labels = to_device(labels);
  gpu::DeviceBuffer<float> d_dlogits(logits.size());
  gpu::DeviceBuffer<double> d_terms(logits.size());
  gpu::DeviceBuffer<std::int32_t> d_correct(rows);
  std::vector<float> dlogits(logits.size());
  auto sum_of = [](const std::vector<double>& terms, std::size_t n) {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) s += terms[i];
    return s;
  };
  auto count_of = [](const std::vector<std::int32_t>& correct) {
    std::int64_t s = 0;
    for (const std::int32_t c : correct) s += c;
    return s;
  };

  LossParams ce;
  ce.label_smoothing = 0.1;
  const LossSums want_ce = loss_forward_backward(ro(logits, rows, classes), labels, ce, 0.25f,
                                                 rw(dlogits, rows, classes));
  gpu::cross_entropy_forward_backward(d_logits.data(), d_labels.data(), rows, classes, ce.label_smoothing, 0.25f,
                                      d_dlogits.data(), d_terms.data(), d_correct.data(), nullptr);
  expect_close("cross-entropy loss", std::vector<double>{sum_of(to_host(d_terms), rows)}, {want_ce.loss}, 1e-13);
  expect_close("cross-entropy dlogits", to_host(d_dlogits), dlogits, 1e-6);
  EXPECT_EQ(count_of(to_host(d_correct)), want_ce.correct);

  LossParams asl;
  asl.asl = true;
  asl.gamma_pos = 1.0;
  asl.gamma_neg = 4.0;
  asl.margin = 0.05;
  const LossSums want_asl = loss_forward_backward(ro(logits, rows, classes), labels, asl, 0.5f,
                                                  rw(dlogits, rows, classes));
  gpu::asl_forward_backward(d_logits.data(), d_labels.data(), rows, classes, asl.gamma_pos, asl.gamma_neg, asl.margin,
                            0.5f, d_dlogits.data(), d_terms.data(), d_correct.data(), nullptr);
  expect_close("asl loss", std::vector<double>{sum_of(to_host(d_terms), logits.size())}, {want_asl.loss}, 1e-13);
  expect_close("asl dlogits", to_host(d_dlogits), dlogits, 1e-6);
  EXPECT_EQ(count_of(to_host(d_correct)), want_asl.correct);

  const LossSums want_eval = cross_entropy_eval(ro(logits, rows, classes), labels);
  gpu::cross_entropy_eval(d_logits.data(), d_labels.data(), rows, classes, d_terms.data(), d_correct.data(), nullptr);
  expect_close("eval loss", std::vector<double>{sum_of(to_host(d_terms), rows)}, {want_eval.loss}, 1e-13);
  EXPECT_EQ(count_of(to_host(d_correct)), want_eval.correct);
}
