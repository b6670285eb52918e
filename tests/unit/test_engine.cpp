// Unit tests of train/StepEngine: the whole MLP's gradient (BatchNorm, dropout, label smoothing)
// against finite differences of an independent double-precision network and against PyTorch (skipped
// when torch cannot be imported); dropout masks; deterministic chunk slots vs the mpi mode;
// SyncBatchNorm over two logical ranks in one process vs one rank holding their batch; matmul precision
// emulation; evaluation with running statistics.
// Everything runs in this one process (a world of one); reducers are the real ones on MPI_COMM_WORLD
// (engine_rig.hpp sets the model, engine and replicas up).
// Not here: the layers one by one (test_layers.cpp), the step loop and the optimizer (train/trainer).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/reducer.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "numerics/philox.hpp"
#include "engine_rig.hpp"
#include "torch_peer.hpp"
#include "train/step_engine.hpp"

using namespace divsim;

using divsim::test::exact;
using divsim::test::hex_list;
using divsim::test::kSeed;
using divsim::test::make_dataset;
using divsim::test::range;
using divsim::test::Rig;
using divsim::test::RigSpec;
using divsim::test::run_python;

namespace {

const double kBnEps = ModelSection{}.bn_eps;  // not constexpr: debug-mode std::vector members are not literal

ModelSection model_cfg(std::vector<std::int64_t> hidden, bool batchnorm, double dropout) {
  ModelSection c;
  c.hidden = std::move(hidden);
  c.batchnorm = batchnorm;
  c.dropout = dropout;
  return c;
}

// The test's own view of an mlp layer (kind, sizes, tensor offsets): the references below are written
// against it, independently of how src/model runs the layers. In a chain layer l's output is activation
// l + 1; a BatchNorm keeps (xhat, mean, invstd), a dropout its mask, as saved tensors.
enum class Kind { linear, batchnorm, relu, dropout };
struct MlpLayer {
  Kind kind;
  std::string name;
  std::size_t in, out, weight = 0, bias = 0, running_mean = 0, running_var = 0, index;
};
std::vector<MlpLayer> mlp_layers(const Model& m) {
  std::vector<MlpLayer> layers;
  for (std::size_t l = 0; l < m.size(); ++l) {
    const Layer& x = m.layer(l);
    const Kind kind = x.style() == "linear" ? Kind::linear : x.style() == "batchnorm1d" ? Kind::batchnorm
                      : x.style() == "relu" ? Kind::relu : Kind::dropout;
    MlpLayer ml{kind, x.name(), static_cast<std::size_t>(x.in_features()), static_cast<std::size_t>(x.out_features()), 0, 0, 0,
                0, l};
    if (!x.params().empty()) {
      ml.weight = x.param(0);
      ml.bias = x.param(1);
    }
    if (!x.buffers().empty()) {
      ml.running_mean = x.buffer(0);
      ml.running_var = x.buffer(1);
    }
    layers.push_back(ml);
  }
  return layers;
}

// BatchNorm starts as the identity (weight 1, bias 0); move it away so its parameters matter.
void perturb_batchnorm(const Model& m, Replica& r) {
  const KeyedStream s(5, Stream::synthetic, 99);
  std::uint64_t i = 0;
  for (const MlpLayer& l : mlp_layers(m)) {
    if (l.kind != Kind::batchnorm) continue;
    for (std::size_t c = 0; c < l.out; ++c) {
      r.params[l.weight + c] = static_cast<float>(1.0 + 0.3 * s.normal(i++));
      r.params[l.bias + c] = static_cast<float>(0.2 * s.normal(i++));
    }
  }
}

// got vs want: max abs err <= rel * max(max |want|, floor). Prints the comparison either way.
void expect_close(const std::string& what, std::span<const float> got, std::span<const double> want, double rel,
                  double floor = 0.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, scale = floor;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double tol = rel * scale;
  std::printf("[ check    ] %-32s max abs err %.3g (scale %.3g, tol %.3g): %s\n", what.c_str(), err, scale, tol,
              err <= tol ? "OK" : "NOT OK");
  EXPECT_LE(err, tol) << what;
  EXPECT_GT(scale, 0.0) << what << ": an all-zero reference checks nothing";
}

void expect_close(const std::string& what, std::span<const float> got, std::span<const float> want, double rel) {
  expect_close(what, got, std::vector<double>(want.begin(), want.end()), rel);
}

// Every parameter tensor: got vs want, both flat in Mlp::tensors() layout. An element's rounding error
// scales with the terms summed into it, not with its own value. That matters for the bias of a Linear
// that feeds BatchNorm: its gradient is mathematically zero (BN removes the mean), so both sides hold
// rounding noise. The scale of a tensor is therefore the largest |want| over its whole layer.
void expect_gradients_close(const std::string& what, const Model& m, std::span<const float> got,
                            std::span<const double> want, double rel) {
  std::vector<double> layer_scale(m.size(), 0.0);
  for (const ParamTensor& t : m.tensors())
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i)
      layer_scale[t.layer_index] = std::max(layer_scale[t.layer_index], std::abs(want[i]));
  for (const ParamTensor& t : m.tensors())
    expect_close(what + " " + t.layer + "." + t.name, got.subspan(t.offset, t.size), want.subspan(t.offset, t.size),
                 rel, layer_scale[t.layer_index]);
}

// The MLP in double precision, written from the PyTorch definitions independently of src/model.
// Training mode: BN over the batch (biased variance for normalising) and dropout multiplying by the given
// per-layer masks; eval mode: BN with running statistics, dropout the identity.
struct ReferencePass {
  std::vector<double> logits;                            // [rows, classes]
  std::map<std::size_t, std::vector<double>> mean, var;  // BN layer index -> batch mean, biased variance
};

ReferencePass reference_forward(const Model& m, std::span<const double> p, std::span<const float> buffers,
                                std::span<const double> x, std::int64_t rows, bool train,
                                const std::vector<std::vector<float>>& masks) {
  ReferencePass pass;
  std::vector<double> cur(x.begin(), x.end()), next;
  for (const MlpLayer& layer : mlp_layers(m)) {
    const std::size_t in = layer.in, out = layer.out;
    const auto n = static_cast<std::size_t>(rows);
    next.assign(n * out, 0.0);
    auto X = [&](std::size_t i, std::size_t k) { return cur[i * in + k]; };
    auto Y = [&](std::size_t i, std::size_t c) -> double& { return next[i * out + c]; };
    for (std::size_t c = 0; c < out; ++c) {
      switch (layer.kind) {
        case Kind::linear:
          for (std::size_t i = 0; i < n; ++i) {
            Y(i, c) = p[layer.bias + c];
            for (std::size_t k = 0; k < in; ++k) Y(i, c) += X(i, k) * p[layer.weight + c * in + k];
          }
          break;
        case Kind::batchnorm: {
          double mean = 0, var = 0;
          if (train) {
            for (std::size_t i = 0; i < n; ++i) mean += X(i, c);
            mean /= static_cast<double>(n);
            for (std::size_t i = 0; i < n; ++i) var += (X(i, c) - mean) * (X(i, c) - mean);
            var /= static_cast<double>(n);
            pass.mean[layer.index].push_back(mean);
            pass.var[layer.index].push_back(var);
          } else {
            mean = buffers[layer.running_mean + c];
            var = buffers[layer.running_var + c];
          }
          for (std::size_t i = 0; i < n; ++i)
            Y(i, c) = p[layer.weight + c] * (X(i, c) - mean) / std::sqrt(var + kBnEps) + p[layer.bias + c];
          break;
        }
        case Kind::relu:
          for (std::size_t i = 0; i < n; ++i) Y(i, c) = std::max(X(i, c), 0.0);
          break;
        case Kind::dropout:
          for (std::size_t i = 0; i < n; ++i) Y(i, c) = X(i, c) * (train ? masks[layer.index][i * out + c] : 1.0);
          break;
      }
    }
    cur.swap(next);
  }
  pass.logits = std::move(cur);
  return pass;
}

// Sum over rows of the label-smoothed cross-entropy (targets (1-eps) onehot + eps/C).
double reference_loss_sum(std::span<const double> logits, std::span<const std::int32_t> labels, std::int64_t classes,
                          double eps) {
  double total = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::span<const double> z =
        logits.subspan(i * static_cast<std::size_t>(classes), static_cast<std::size_t>(classes));
    const double m = *std::max_element(z.begin(), z.end());
    double s = 0;
    for (const double v : z) s += std::exp(v - m);
    const double lse = m + std::log(s);
    for (std::size_t c = 0; c < z.size(); ++c)
      total += (eps / static_cast<double>(classes) + (static_cast<int>(c) == labels[i] ? 1 - eps : 0.0)) * (lse - z[c]);
  }
  return total;
}

std::vector<double> inputs_of(const Dataset& d, std::span<const std::int64_t> samples) {
  std::vector<double> x;
  for (const std::int64_t s : samples) x.insert(x.end(), d.row(s), d.row(s) + d.dim);
  return x;
}

std::vector<std::int32_t> labels_of(const Dataset& d, std::span<const std::int64_t> samples) {
  std::vector<std::int32_t> y;
  for (const std::int64_t s : samples) y.push_back(d.y[static_cast<std::size_t>(s)]);
  return y;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
         });
}

// --- PyTorch bridge: numbers travel as exact hex floats (printf %a <-> float.hex / float.fromhex). ---

}  // namespace

TEST(StepEngineGrad, WholeNetworkMatchesFiniteDifferences) {
  // 12-7-5-3 with BatchNorm and dropout, label smoothing 0.1, one micro-batch of 8 (mpi mode: slot 0
  // holds the mean gradient). The reference uses the engine's own dropout masks, so both compute the
  // same function; its central differences (h = 1e-6, double) are accurate to ~1e-9.
  const Dataset data = make_dataset(16, 12, 3);
  RigSpec spec{model_cfg({7, 5}, true, 0.2)};
  spec.smoothing = 0.1;
  Rig rig(spec, data);
  Replica& r = rig.replicas[0];
  perturb_batchnorm(rig.model, r);
  const auto samples = range(3, 8);
  rig.run_step(4, {samples});

  std::vector<std::vector<float>> masks(rig.model.size());
  for (const MlpLayer& l : mlp_layers(rig.model))
    if (l.kind == Kind::dropout) masks[l.index] = r.saved[l.index][0];
  std::vector<float> fresh_buffers(rig.model.num_buffers());
  rig.model.init_buffers(fresh_buffers);
  const auto x = inputs_of(data, samples);
  const auto y = labels_of(data, samples);
  std::vector<double> p(r.params.begin(), r.params.end());
  auto mean_loss = [&] {
    return reference_loss_sum(reference_forward(rig.model, p, fresh_buffers, x, 8, true, masks).logits, y, 3, 0.1) / 8;
  };
  const double loss = mean_loss();
  EXPECT_NEAR(r.loss_sum / 8, loss, 1e-6 * loss);
  std::printf("[ check    ] loss divsim %.9g reference %.9g\n", r.loss_sum / 8, loss);

  std::vector<double> fd(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + 1e-6;
    const double up = mean_loss();
    p[i] = keep - 1e-6;
    const double down = mean_loss();
    p[i] = keep;
    fd[i] = (up - down) / 2e-6;
  }
  // float32 forward and backward through five parametrised layers: ~1e-7 of the layer's scale.
  expect_gradients_close("fd", rig.model, rig.grad(r), fd, 1e-5);

  // Running statistics: (1 - m) * initial + m * batch, with the unbiased variance (PyTorch).
  const double m = spec.model.bn_momentum;
  const ReferencePass pass = reference_forward(rig.model, p, fresh_buffers, x, 8, true, masks);
  for (const MlpLayer& l : mlp_layers(rig.model)) {
    if (l.kind != Kind::batchnorm) continue;
    std::vector<double> want_mean, want_var;
    for (std::size_t c = 0; c < l.out; ++c) {
      want_mean.push_back(m * pass.mean.at(l.index)[c]);
      want_var.push_back((1 - m) + m * pass.var.at(l.index)[c] * 8.0 / 7.0);
    }
    expect_close(l.name + ".running_mean", std::span<const float>(r.buffers.data() + l.running_mean, want_mean.size()),
                 want_mean, 1e-5);
    expect_close(l.name + ".running_var", std::span<const float>(r.buffers.data() + l.running_var, want_var.size()),
                 want_var, 1e-5);
  }
}

TEST(StepEngineDropout, MaskIsInvertedAndKeyedBySampleStepAndLayer) {
  // Two hidden layers of 16 with p = 0.25; two logical ranks: rank 1 sees rank 0's samples reversed.
  const Dataset data = make_dataset(64, 12, 3);
  RigSpec spec{model_cfg({16, 16}, false, 0.25)};
  spec.micro = 64;
  spec.world_size = spec.ranks = 2;
  Rig rig(spec, data);
  auto forward = range(0, 64), backward = forward;
  std::reverse(backward.begin(), backward.end());
  rig.run_step(9, {forward, backward});
  const std::size_t drop1 = 2, drop2 = 5;  // fc1 relu1 drop1 fc2 relu2 drop2 fc3
  ASSERT_EQ(rig.model.layer(drop1).name(), "drop1");
  ASSERT_EQ(rig.model.layer(drop2).name(), "drop2");

  const float scale = 1.0f / 0.75f;
  const Replica &r0 = rig.replicas[0], &r1 = rig.replicas[1];
  for (const std::size_t l : {drop1, drop2}) {
    const std::vector<float>& mask = r0.saved[l][0];
    int dropped = 0;
    for (std::size_t i = 0; i < mask.size(); ++i) {
      ASSERT_TRUE(mask[i] == 0.0f || mask[i] == scale) << "mask value " << mask[i];
      dropped += mask[i] == 0.0f;
      // y = x * mask: exact zeros, the rest x / (1 - p) rounded once (act[l] is the ReLU output).
      ASSERT_EQ(r0.act[l + 1][i], r0.act[l][i] * mask[i]);
    }
    // 1024 draws with p = 0.25: 256 expected, standard deviation 13.9; allow 5 sigma.
    EXPECT_NEAR(dropped, 256, 70) << rig.model.layer(l).name();
    // Keyed by the sample, not by the rank or the row: rank 1's row i is rank 0's row 63 - i.
    for (std::size_t i = 0; i < 64; ++i)
      ASSERT_TRUE(std::equal(r1.saved[l][0].begin() + static_cast<std::ptrdiff_t>(i * 16),
                             r1.saved[l][0].begin() + static_cast<std::ptrdiff_t>(i * 16 + 16),
                             r0.saved[l][0].begin() + static_cast<std::ptrdiff_t>((63 - i) * 16)))
          << "row " << i;
  }
  // Different layers, steps and dropout seeds draw different masks (equal entries by chance: 5/8).
  auto agreement = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::size_t same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    return static_cast<double>(same) / static_cast<double>(a.size());
  };
  EXPECT_LT(agreement(r0.saved[drop1][0], r0.saved[drop2][0]), 0.75) << "another layer";
  const std::vector<float> step9 = r0.saved[drop1][0];
  rig.replicas[1].knobs.dropout_seed = kSeed + 1;  // as an unsynchronised dropout seed would
  rig.run_step(10, {forward, forward});
  EXPECT_LT(agreement(step9, r0.saved[drop1][0]), 0.75) << "another step";
  EXPECT_LT(agreement(r0.saved[drop1][0], r1.saved[drop1][0]), 0.75) << "another dropout seed";
}

TEST(StepEngineDeterministic, ChunkSlotsSumToTheMpiGradient) {
  // micro 8 x accum 2 on one rank; deterministic chunks of 2 give 8 slots, each one chunk's unscaled sum.
  const Dataset data = make_dataset(32, 12, 3);
  RigSpec mpi{model_cfg({7, 5}, true, 0.0)};
  mpi.accum = 2;
  mpi.smoothing = 0.1;
  RigSpec det = mpi;
  det.reduce = ReduceMode::deterministic;
  det.chunk = 2;
  Rig a(mpi, data), b(det, data);
  perturb_batchnorm(a.model, a.replicas[0]);
  perturb_batchnorm(b.model, b.replicas[0]);
  const auto samples = range(5, 16);
  a.run_step(0, {samples});
  b.run_step(0, {samples});
  ASSERT_EQ(a.engine.grad_parts(), 1);
  ASSERT_EQ(b.engine.grad_parts(), 8);
  const Replica &ra = a.replicas[0], &rb = b.replicas[0];
  for (std::size_t slot = 0; slot < 8; ++slot) {
    const std::span<const float> g(rb.grads.data() + slot * b.model.num_params(), b.model.num_params());
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; })) << "slot " << slot << " is empty";
  }
  const double parts = std::accumulate(rb.loss_parts.begin(), rb.loss_parts.end(), 0.0);
  EXPECT_NEAR(parts, rb.loss_sum, 1e-12 * rb.loss_sum);
  EXPECT_NEAR(rb.loss_sum, ra.loss_sum, 1e-6 * ra.loss_sum);

  a.reduce(1.0);   // DDP: sum over the world of one, divided by W = 1
  b.reduce(16.0);  // deterministic: exact sum of the slots, divided by the global batch
  const std::span<const float> mpi_grad = a.grad(ra);
  expect_gradients_close("det vs mpi", a.model, b.grad(rb), std::vector<double>(mpi_grad.begin(), mpi_grad.end()),
                         1e-5);
  expect_close("det vs mpi running stats", rb.buffers, ra.buffers, 1e-6);
}

TEST(StepEngineSyncBn, TwoLogicalRanksEqualOneRankHoldingBothBatches) {
  // Deterministic reducer, chunks of 2: ranks {0..3} and {4..7} with SyncBatchNorm vs one rank with
  // {0..7}. Every chunk has the same shape and the statistics are exact sums of the same partials, so
  // BN statistics, per-chunk losses, slot gradients and the reduced gradient are bitwise equal.
  const Dataset data = make_dataset(16, 12, 3);
  RigSpec two{model_cfg({7, 5}, true, 0.0)};
  two.micro = 4;
  two.chunk = 2;
  two.world_size = two.ranks = 2;
  two.reduce = ReduceMode::deterministic;
  two.sync_bn = true;
  two.smoothing = 0.1;
  RigSpec one = two;
  one.micro = 8;
  one.world_size = one.ranks = 1;
  RigSpec local = two;  // the control: no SyncBatchNorm
  local.sync_bn = false;
  Rig r2(two, data), r1(one, data), rl(local, data);
  r2.run_step(0, {range(0, 4), range(4, 4)});
  rl.run_step(0, {range(0, 4), range(4, 4)});
  r1.run_step(0, {range(0, 8)});
  const Replica& whole = r1.replicas[0];

  for (const MlpLayer& l : mlp_layers(r1.model)) {
    if (l.kind != Kind::batchnorm) continue;
    for (const Replica& r : r2.replicas) {
      EXPECT_TRUE(bitwise_equal(r.saved[l.index][1], whole.saved[l.index][1])) << l.name << " rank " << r.rank;
      EXPECT_TRUE(bitwise_equal(r.saved[l.index][2], whole.saved[l.index][2])) << l.name << " rank " << r.rank;
    }
    EXPECT_FALSE(bitwise_equal(rl.replicas[0].saved[l.index][1], whole.saved[l.index][1])) << "control " << l.name;
  }
  for (const Replica& r : r2.replicas) EXPECT_TRUE(bitwise_equal(r.buffers, whole.buffers)) << "rank " << r.rank;
  const std::size_t np = r1.model.num_params();
  for (std::size_t k = 0; k < 2; ++k)
    for (std::size_t c = 0; c < 2; ++c) {
      const std::size_t slot = 2 * k + c;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(r2.replicas[k].loss_parts[c]),
                std::bit_cast<std::uint64_t>(whole.loss_parts[slot]))
          << "chunk " << slot;
      EXPECT_TRUE(bitwise_equal(std::span<const float>(r2.replicas[k].grads.data() + c * np, np),
                                std::span<const float>(whole.grads.data() + slot * np, np)))
          << "chunk " << slot << " gradient";
    }
  r2.reduce(8.0);
  r1.reduce(8.0);
  for (const Replica& r : r2.replicas)
    EXPECT_TRUE(
        bitwise_equal(std::span<const float>(r.grads.data(), np), std::span<const float>(whole.grads.data(), np)))
        << "reduced gradient, rank " << r.rank;
  std::printf("[ check    ] SyncBN 2 ranks x 4 vs 1 rank x 8: loss %.17g vs %.17g (bitwise)\n",
              r2.replicas[0].loss_sum + r2.replicas[1].loss_sum, whole.loss_sum);
}

TEST(StepEnginePrecision, MatmulRoundingMovesResultsByTheFormatsRoundoff) {
  // Three logical ranks with the same parameters and batch, matmul inputs in fp32 / tf32 / bf16.
  // TF32 keeps 10 mantissa bits (unit roundoff 2^-11 = 4.9e-4), BF16 7 (2^-8 = 3.9e-3). The parameters
  // are scaled by 2.5 so the logits are O(1) and the loss is not flat in them, as after some training.
  const Dataset data = make_dataset(64, 64, 10);
  RigSpec spec{model_cfg({32, 16}, false, 0.0)};
  spec.micro = 64;
  spec.world_size = spec.ranks = 3;
  Rig rig(spec, data);
  for (Replica& r : rig.replicas)
    for (float& v : r.params) v *= 2.5f;
  rig.replicas[1].knobs.matmul = MatmulFormat::tf32;
  rig.replicas[2].knobs.matmul = MatmulFormat::bf16;
  const auto s = range(0, 64);
  rig.run_step(0, {s, s, s});

  // Relative change against fp32: of the loss, and (max abs / max |fp32|) of the logits, the last layer's
  // gradient and the whole gradient. The first three are continuous functions of the rounded inputs;
  // the whole gradient is not: where a ReLU input changes sign, that unit's gradient for that sample
  // switches on or off (one such flip among 1024 units here moves fc1's and fc2's gradients by ~2%).
  auto max_rel = [](std::span<const float> got, std::span<const float> ref) {
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(got[i] - ref[i])));
      scale = std::max(scale, static_cast<double>(std::abs(ref[i])));
    }
    return err / scale;
  };
  const Replica& ref = rig.replicas[0];
  const std::size_t last = rig.model.tensors()[rig.model.tensors().size() - 2].offset;  // fc3.weight, fc3.bias
  struct Change {
    double loss, logits, last_grad, grad;
  };
  std::vector<Change> change;
  for (const std::size_t k : {1, 2}) {
    const Replica& r = rig.replicas[k];
    change.push_back({std::abs(r.loss_sum - ref.loss_sum) / ref.loss_sum, max_rel(r.act.back(), ref.act.back()),
                      max_rel(rig.grad(r).subspan(last), rig.grad(ref).subspan(last)),
                      max_rel(rig.grad(r), rig.grad(ref))});
    const Change& c = change.back();
    std::printf("[ check    ] %s vs fp32 relative change: loss %.3g logits %.3g fc3 gradient %.3g gradient %.3g\n",
                name_of(r.knobs.matmul).data(), c.loss, c.logits, c.last_grad, c.grad);
  }
  // TF32: above 1e-5 (the rounding happened) and below 4 unit roundoffs, 2^-9.
  for (const double v : {change[0].loss, change[0].logits, change[0].last_grad}) {
    EXPECT_GT(v, 1e-5);
    EXPECT_LT(v, 0x1p-9);
  }
  EXPECT_LT(change[0].grad, 0.1);
  // BF16 has 8x the unit roundoff: larger changes, below 4 of its unit roundoffs, 2^-6.
  EXPECT_GT(change[1].logits, 2 * change[0].logits);
  EXPECT_GT(change[1].last_grad, 2 * change[0].last_grad);
  EXPECT_LT(change[1].logits, 0x1p-6);
  EXPECT_LT(change[1].last_grad, 0x1p-6);
}

TEST(StepEngineEval, UsesRunningStatisticsAndNoDropoutInFixedBatches) {
  // 2500 samples: eval batches of 1000, 1000 and 500. Running statistics set to arbitrary values.
  const Dataset data = make_dataset(2500, 12, 3, 2);
  RigSpec spec{model_cfg({7, 5}, true, 0.3)};
  Rig rig(spec, data);
  Replica& r = rig.replicas[0];
  perturb_batchnorm(rig.model, r);
  const KeyedStream s(5, Stream::synthetic, 98);
  for (const MlpLayer& l : mlp_layers(rig.model)) {
    if (l.kind != Kind::batchnorm) continue;
    for (std::size_t c = 0; c < l.out; ++c) {
      r.buffers[l.running_mean + c] = static_cast<float>(0.5 * s.normal(2 * c));
      r.buffers[l.running_var + c] = static_cast<float>(0.2 + std::abs(s.normal(2 * c + 1)));
    }
  }
  const EvalResult got = rig.engine.evaluate(r, data);

  const auto all = range(0, data.n);
  const std::vector<double> p(r.params.begin(), r.params.end());
  const ReferencePass pass = reference_forward(rig.model, p, r.buffers, inputs_of(data, all), data.n, false, {});
  const double want_loss = reference_loss_sum(pass.logits, data.y, 3, 0.0) / static_cast<double>(data.n);
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < data.n; ++i) {
    const auto row = pass.logits.begin() + i * 3;
    correct += std::max_element(row, row + 3) - row == data.y[static_cast<std::size_t>(i)];
  }
  std::printf("[ check    ] eval loss divsim %.9g reference %.9g; accuracy %.6g vs %.6g\n", got.loss, want_loss,
              got.accuracy, static_cast<double>(correct) / 2500.0);
  EXPECT_NEAR(got.loss, want_loss, 1e-6 * want_loss);
  EXPECT_EQ(got.accuracy, static_cast<double>(correct) / 2500.0);

  // Dropout has no parameters and is the identity in eval mode: the same network without it agrees bit for bit.
  RigSpec no_drop = spec;
  no_drop.model.dropout = 0.0;
  Rig plain(no_drop, data);
  plain.replicas[0].params = r.params;
  plain.replicas[0].buffers = r.buffers;
  const EvalResult same = plain.engine.evaluate(plain.replicas[0], data);
  EXPECT_EQ(same.loss, got.loss);
  EXPECT_EQ(same.accuracy, got.accuracy);
}

TEST(StepEngineTorch, OneStepMatchesPyTorch) {
  // 12-7-5-3 with BatchNorm, label smoothing 0.1, one batch of 6 through the mpi-mode engine
  // (grad_scale 1/6, one chunk) vs torch.nn.Sequential in float32: loss, every gradient, the running
  // statistics after the step, and the eval loss/accuracy with them. Tolerance: 1e-5 of each tensor's scale.
  const Dataset data = make_dataset(6, 12, 3, 3);
  RigSpec spec{model_cfg({7, 5}, true, 0.0)};
  spec.micro = 6;
  spec.smoothing = 0.1;
  Rig rig(spec, data);
  Replica& r = rig.replicas[0];
  perturb_batchnorm(rig.model, r);
  const std::vector<float> params = r.params;
  rig.run_step(0, {range(0, 6)});
  rig.reduce(1.0);
  const EvalResult eval = rig.engine.evaluate(r, data);

  std::string script = std::string(test::kImportTorch) +
      "from collections import OrderedDict\n"
      "F = torch.nn.functional\n"
      "h = lambda s: [float.fromhex(v) for v in s.split()]\n"
      "out = lambda key, t: print(key, ' '.join(float(v).hex() for v in t.flatten().tolist()))\n"
      "mods = OrderedDict()\n";
  for (const MlpLayer& l : mlp_layers(rig.model)) {
    const std::string in = std::to_string(l.in), o = std::to_string(l.out);
    script += "mods['" + l.name + "'] = " +
              (l.kind == Kind::linear      ? "torch.nn.Linear(" + in + ", " + o + ")"
               : l.kind == Kind::batchnorm ? "torch.nn.BatchNorm1d(" + o + ", eps=" + exact(kBnEps) +
                                                      ", momentum=" + exact(ModelSection{}.bn_momentum) + ")"
                                                : std::string("torch.nn.ReLU()")) +
              "\n";
  }
  script += "net = torch.nn.Sequential(mods)\nparams = {\n";
  for (const ParamTensor& t : rig.model.tensors())
    script += "  '" + t.layer + "." + t.name + "': h('" +
              hex_list(std::span<const float>(params.data() + t.offset, t.size)) + "'),\n";
  std::vector<int> labels(data.y.begin(), data.y.end());
  script +=
      "}\nx = torch.tensor(h('" + hex_list(data.x) + "'), dtype=torch.float32).reshape(6, 12)\ny = torch.tensor([";
  for (const int v : labels) script += std::to_string(v) + ",";
  script +=
      "])\n"
      "with torch.no_grad():\n"
      "    for n, p in net.named_parameters(): p.copy_(torch.tensor(params[n], dtype=torch.float32).reshape(p.shape))\n"
      "net.train()\n"
      "loss = F.cross_entropy(net(x), y, label_smoothing=0.1)\n"
      "loss.backward()\n"
      "out('loss', loss.detach())\n"
      "for n, p in net.named_parameters(): out(n, p.grad)\n"
      "for n, b in net.named_buffers():\n"
      "    if 'running' in n: out(n, b)\n"
      "net.eval()\n"
      "with torch.no_grad():\n"
      "    z = net(x)\n"
      "    out('eval', torch.stack([F.cross_entropy(z, y), (z.argmax(1) == y).float().mean()]))\n";
  std::string raw;
  const auto torch = run_python(script, raw);
  if (torch.contains("NO_TORCH")) GTEST_SKIP() << "torch cannot be imported: " << raw;
  ASSERT_TRUE(torch.contains("loss") && torch.contains("eval")) << "unexpected python output:\n" << raw;

  const std::vector<double>& tl = torch.at("loss");
  ASSERT_EQ(tl.size(), 1u);
  std::printf("[ torch    ] loss divsim %.9g torch %.9g\n", r.loss_sum / 6, tl[0]);
  EXPECT_NEAR(r.loss_sum / 6, tl[0], 1e-5 * tl[0]);
  std::vector<double> torch_grad;
  for (const ParamTensor& t : rig.model.tensors()) {
    const std::string name = t.layer + "." + t.name;
    ASSERT_TRUE(torch.contains(name)) << name << " missing from torch's named_parameters:\n" << raw;
    ASSERT_EQ(torch.at(name).size(), t.size) << name;
    torch_grad.insert(torch_grad.end(), torch.at(name).begin(), torch.at(name).end());
  }
  expect_gradients_close("torch", rig.model, rig.grad(r), torch_grad, 1e-5);
  for (const MlpLayer& l : mlp_layers(rig.model)) {
    if (l.kind != Kind::batchnorm) continue;
    const std::size_t n = l.out;
    expect_close("torch " + l.name + ".running_mean", std::span<const float>(r.buffers.data() + l.running_mean, n),
                 torch.at(l.name + ".running_mean"), 1e-5);
    expect_close("torch " + l.name + ".running_var", std::span<const float>(r.buffers.data() + l.running_var, n),
                 torch.at(l.name + ".running_var"), 1e-5);
  }
  const std::vector<double>& te = torch.at("eval");
  ASSERT_EQ(te.size(), 2u);
  std::printf("[ torch    ] eval loss divsim %.9g torch %.9g; accuracy %.4g vs %.4g\n", eval.loss, te[0], eval.accuracy,
              te[1]);
  EXPECT_NEAR(eval.loss, te[0], 1e-5 * te[0]);
  EXPECT_NEAR(eval.accuracy, te[1], 1e-6);
}
