// The GPU engine against the CPU engine (train/step_engine) on the same replicas and samples, the NCCL
// reducer against independently computed sums, and the set-up errors a user sees.
//
// Engine comparisons run one optimizer step of two micro-steps (accumulation), then a second step with
// changed parameters (the GPU must not keep the first step's), then evaluation. Tolerances, relative to
// the largest reference value: losses 1e-5, gradients 1e-4, BN running statistics and layer statistics
// 1e-5 / 1e-4. The float noise of a different GEMM order is ~1e-6; a real bug (a wrong mask, stale
// parameters, a transposed operand) is an error of order one.
#include <memory>
#include <string>
#include <vector>

#include "comm/reducer.hpp"
#include "config/config_error.hpp"
#include "gpu_engine.hpp"
#include "gpu_test_support.hpp"
#include "model/activation_stats.hpp"
#include "model/model.hpp"
#include "nccl_reducer.hpp"
#include "train/step_engine.hpp"

using namespace divsim;
using gputest::expect_bitwise;
using gputest::expect_close;
using gputest::normal_values;

namespace {

constexpr std::int64_t kMicro = 64;
constexpr int kAccum = 2;

struct Options {
  int replicas = 1;  // logical ranks in this process
  bool batchnorm = false, sync_bn = false, asl = false;
  double dropout = 0.0;
};

Dataset make_data(std::int64_t n, std::int64_t dim, std::int64_t classes, std::uint32_t what) {
  Dataset d;
  d.n = n;
  d.dim = dim;
  d.classes = classes;
  d.x = normal_values(static_cast<std::size_t>(n * dim), what);
  d.y.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) d.y[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 3) % classes);
  return d;
}

// One model, data set, reducer and engine settings; CPU and GPU engines built over them.
struct Bench {
  explicit Bench(const Options& o)
      : options(o),
        model(
            [&] {
              ModelSection m;
              m.hidden = {256, 128};
              m.batchnorm = o.batchnorm;
              m.dropout = o.dropout;
              return m;
            }(),
            Shape{256}, 10),
        train(make_data(1024, 256, 10, 40)),
        test(make_data(2500, 256, 10, 41)) {
    ReduceLayout layout;
    layout.world_size = o.replicas;
    layout.rank_count = o.replicas;
    layout.num_params = model.num_params();
    for (const ParamTensor& t : model.tensors()) layout.tensors.emplace_back(t.offset, t.size);
    reducer = make_reducer(ReduceMode::mpi, MPI_COMM_SELF, layout);
    settings.plan = {o.replicas, kMicro, kAccum, kMicro * kAccum * o.replicas};
    settings.chunk = kMicro;
    settings.sync_bn = o.sync_bn;
  }

  std::vector<Replica> replicas(const Engine& engine, MatmulFormat format) const {
    std::vector<Replica> reps(static_cast<std::size_t>(options.replicas));
    for (int k = 0; k < options.replicas; ++k) {
      Replica& r = reps[static_cast<std::size_t>(k)];
      r.rank = k;
      engine.allocate(r);
      model.init_parameters(r.params, 42);
      model.init_buffers(r.buffers);
      r.knobs.matmul = format;
      r.knobs.dropout_seed = 9;
      r.knobs.loss.asl = options.asl;
      r.knobs.loss.label_smoothing = options.asl ? 0.0 : 0.05;
    }
    return reps;
  }

  // One optimizer step's forward/backward, as the step loop drives it; layer statistics of micro-step 0.
  LayerStatsBuffer step(Engine& engine, std::vector<Replica>& reps, std::int64_t step) const {
    const std::size_t L = model.size(), R = reps.size();
    LayerStatsBuffer stats{std::vector<double>(R * L * kStatCount), std::vector<double>(R * L * kStatCount),
                           std::vector<double>(R * L)};
    for (Replica& r : reps) {
      std::fill(r.grads.begin(), r.grads.end(), 0.0f);
      std::fill(r.loss_parts.begin(), r.loss_parts.end(), 0.0);
      r.loss_sum = 0.0;
      r.correct = 0;
    }
    for (int micro = 0; micro < kAccum; ++micro) {
      for (Replica& r : reps)
        for (std::size_t i = 0; i < r.samples.size(); ++i)
          r.samples[i] = (((step * kAccum + micro) * options.replicas + r.rank) * kMicro +
                          static_cast<std::int64_t>(i) * 7) % train.n;
      engine.run_micro(reps, step, micro, static_cast<float>(1.0 / (kMicro * kAccum)), micro == 0 ? &stats : nullptr);
    }
    return stats;
  }

  std::unique_ptr<Engine> cpu() { return std::make_unique<StepEngine>(model, train, *reducer, settings); }
  std::unique_ptr<Engine> gpu() { return make_gpu_engine(model, train, *reducer, settings, 0, MPI_COMM_SELF); }

  Options options;
  Model model;
  Dataset train, test;
  std::unique_ptr<Reducer> reducer;
  EngineSettings settings;
};

std::vector<float> first_gradient(const Replica& r, std::size_t n) { return {r.grads.begin(), r.grads.begin() + n}; }

// Largest |a - b| over the gradients of all replicas, relative to the largest |b|.
double gradient_error(const std::vector<Replica>& a, const std::vector<Replica>& b) {
  double err = 0.0, ref = 0.0;
  for (std::size_t k = 0; k < a.size(); ++k)
    for (std::size_t i = 0; i < a[k].grads.size(); ++i) {
      err = std::max(err, std::abs(double{a[k].grads[i]} - b[k].grads[i]));
      ref = std::max(ref, std::abs(double{b[k].grads[i]}));
    }
  return err / ref;
}

void compare_engines(const Options& o) {
  Bench bench(o);
  auto cpu = bench.cpu();
  auto gpu = bench.gpu();
  auto cpu_reps = bench.replicas(*cpu, MatmulFormat::fp32);
  auto gpu_reps = bench.replicas(*gpu, MatmulFormat::fp32);
  const std::size_t np = bench.model.num_params();
  for (std::int64_t step = 0; step < 2; ++step) {
    if (step == 1)  // new parameters between steps, as after an optimizer update
      for (auto* reps : {&cpu_reps, &gpu_reps})
        for (Replica& r : *reps)
          for (float& p : r.params) p *= 0.9f;
    const LayerStatsBuffer cs = bench.step(*cpu, cpu_reps, step);
    const LayerStatsBuffer gs = bench.step(*gpu, gpu_reps, step);
    const std::string at = " (step " + std::to_string(step) + ")";
    for (std::size_t k = 0; k < cpu_reps.size(); ++k) {
      const std::string rank = " rank " + std::to_string(k) + at;
      expect_close("loss sum" + rank, std::vector<double>{gpu_reps[k].loss_sum}, {cpu_reps[k].loss_sum}, 1e-5);
      expect_close("loss part" + rank, gpu_reps[k].loss_parts, cpu_reps[k].loss_parts, 1e-5);
      EXPECT_NEAR(static_cast<double>(gpu_reps[k].correct), static_cast<double>(cpu_reps[k].correct), 1.0);
      expect_close("gradient" + rank, first_gradient(gpu_reps[k], np), first_gradient(cpu_reps[k], np), 1e-4);
      expect_close("BN running statistics" + rank, gpu_reps[k].buffers, cpu_reps[k].buffers, 1e-5);
    }
    expect_close("layer forward statistics" + at, gs.forward, cs.forward, 1e-4);
    expect_close("layer backward statistics" + at, gs.backward, cs.backward, 1e-4);
  }
  for (std::size_t k = 0; k < cpu_reps.size(); ++k) {
    const EvalResult c = cpu->evaluate(cpu_reps[k], bench.test), g = gpu->evaluate(gpu_reps[k], bench.test);
    expect_close("eval loss rank " + std::to_string(k), std::vector<double>{g.loss}, {c.loss}, 1e-5);
    EXPECT_NEAR(g.accuracy, c.accuracy, 2.0 / static_cast<double>(bench.test.n));
  }
}

}  // namespace

TEST(GpuEngine, MatchesTheCpuWithBatchNormDropoutAndSyncBn) {
  DIVSIM_REQUIRE_GPU();
  compare_engines({.replicas = 2, .batchnorm = true, .sync_bn = true, .dropout = 0.2});
}

TEST(GpuEngine, MatchesTheCpuWithPerRankBatchNorm) {
  DIVSIM_REQUIRE_GPU();
  compare_engines({.replicas = 2, .batchnorm = true});
}

TEST(GpuEngine, MatchesTheCpuWithAslLoss) {
  DIVSIM_REQUIRE_GPU();
  compare_engines({.asl = true});
}

TEST(GpuEngine, Tf32AndBf16ChangeTheGradientLikeTheCpuEmulation) {
  DIVSIM_REQUIRE_GPU();
  Bench bench({});
  auto cpu = bench.cpu();
  auto gpu = bench.gpu();
  auto run = [&](Engine& engine, MatmulFormat f) {
    auto reps = bench.replicas(engine, f);
    bench.step(engine, reps, 0);
    return reps;
  };
  const auto cpu32 = run(*cpu, MatmulFormat::fp32), gpu32 = run(*gpu, MatmulFormat::fp32);
  const auto cpu_tf32 = run(*cpu, MatmulFormat::tf32), gpu_tf32 = run(*gpu, MatmulFormat::tf32);
  const auto cpu_bf16 = run(*cpu, MatmulFormat::bf16), gpu_bf16 = run(*gpu, MatmulFormat::bf16);
  const double fp32 = gradient_error(gpu32, cpu32);
  const double tf32_hw = gradient_error(gpu_tf32, cpu32), tf32_emu = gradient_error(cpu_tf32, cpu32);
  const double bf16_gpu_cpu = gradient_error(gpu_bf16, cpu_bf16), bf16_emu = gradient_error(cpu_bf16, cpu32);
  std::printf("  gradient max error relative to max |g|:\n"
              "    GPU fp32 (pedantic) vs CPU fp32   %.3e\n"
              "    GPU tf32 (tensor cores) vs CPU fp32 %.3e   CPU tf32 emulation vs CPU fp32 %.3e\n"
              "    GPU bf16 vs CPU bf16 emulation     %.3e   CPU bf16 emulation vs CPU fp32 %.3e\n",
              fp32, tf32_hw, tf32_emu, bf16_gpu_cpu, bf16_emu);
  EXPECT_LT(fp32, 1e-4);
  EXPECT_GT(tf32_hw, 10.0 * fp32) << "TF32 did not change the gradient: tensor-core TF32 was not used";
  EXPECT_GT(tf32_hw, 0.1 * tf32_emu);
  EXPECT_LT(tf32_hw, 10.0 * tf32_emu);
  // Both sides round the GEMM inputs to bf16 the same way: what is left is summation order, plus inputs
  // that land on the other side of a bf16 rounding boundary.
  EXPECT_LT(bf16_gpu_cpu, 0.5 * bf16_emu);
}

TEST(GpuEngine, RefusesDeterministicMode) {
  Bench bench({});
  bench.settings.deterministic = true;
  try {
    bench.gpu();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::printf("  %s\n", e.what());
    EXPECT_EQ(e.key(), "dist.reduce");
  }
}

TEST(GpuEngine, WithoutAGpuSaysSo) {
  std::string why;
  if (gpu::visible_devices(why) > 0) GTEST_SKIP() << "this machine has a GPU: the no-GPU message cannot be seen";
  Bench bench({});
  try {
    bench.gpu();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::printf("  %s\n", e.what());
    EXPECT_EQ(e.key(), "run.device");
    EXPECT_NE(std::string(e.what()).find("process 0"), std::string::npos);
  }
}

TEST(NcclReducer, AveragesLocalRanksAndSumsStatistics) {
  DIVSIM_REQUIRE_GPU();
  const std::size_t n = 1000;
  ReduceLayout layout;
  layout.world_size = 2;
  layout.rank_count = 2;
  layout.num_params = n;
  layout.tensors = {{0, n}};
  auto reducer = make_nccl_reducer(MPI_COMM_SELF, layout);
  std::vector<float> a = normal_values(n, 50), b = normal_values(n, 51);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = (a[i] + b[i]) / 2.0f;
  const std::vector<std::span<float>> grads = {a, b};
  reducer->allreduce_gradients(grads, 1, 2.0);
  expect_bitwise("rank 0 gradient", a, want);
  expect_bitwise("rank 1 gradient", b, want);

  const std::vector<double> values = {1.5, -2.0, 3.25, 0.5, 4.0, -1.0};  // [2 ranks][1 part][3]
  std::vector<double> out(3);
  reducer->sum_statistics(values, 1, out);
  expect_bitwise("statistics", out, std::vector<double>{2.0, 2.0, 2.25});
}
