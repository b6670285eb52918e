#pragma once
// A model, its StepEngine and this process's replicas, set up as Run sets them up, for tests that run
// whole forward and backward passes (test_engine.cpp, test_models.cpp); and the in-memory data they run on.
// Everything runs in this one process (a world of one); reducers are the real ones on MPI_COMM_WORLD.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "comm/reducer.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "numerics/philox.hpp"
#include "train/step_engine.hpp"

namespace divsim::test {

inline constexpr std::uint64_t kSeed = 11;  // parameter init and dropout

// In-memory data: standard normal features, labels drawn uniformly, keyed by `what`.
inline Dataset make_dataset(std::int64_t n, std::int64_t dim, std::int64_t classes, std::uint32_t what = 1) {
  Dataset d;
  d.n = n;
  d.dim = dim;
  d.classes = classes;
  const KeyedStream xs(77, Stream::synthetic, what, 0), ys(77, Stream::synthetic, what, 1);
  d.x.resize(static_cast<std::size_t>(n * dim));
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x[i] = static_cast<float>(xs.normal(i));
  d.y.resize(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < d.y.size(); ++i)
    d.y[i] = static_cast<std::int32_t>(ys.below(i, static_cast<std::uint64_t>(classes)));
  return d;
}

// The same as single-channel height x width images (models see (1, height, width) samples).
inline Dataset make_images(std::int64_t n, int height, int width, std::int64_t classes, std::uint32_t what = 1) {
  Dataset d = make_dataset(n, std::int64_t{height} * width, classes, what);
  d.height = height;
  d.width = width;
  d.background.assign(static_cast<std::size_t>(d.dim), 0.0f);
  return d;
}

// Token sequences of length T over a vocabulary of V: ids drawn uniformly, targets the next id; sample i
// is padded after T - 2 (i % 3) positions (inputs 0, targets kIgnoredTarget), as the text loaders pad.
inline Dataset make_sequences(std::int64_t n, std::int64_t T, std::int64_t V, std::uint32_t what = 1) {
  Dataset d;
  d.n = n;
  d.dim = d.targets = T;
  d.classes = V;
  const KeyedStream ids(77, Stream::synthetic, what, 2);
  d.x.resize(static_cast<std::size_t>(n * T));
  d.y.resize(d.x.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t length = T - 2 * (i % 3);
    std::vector<std::int32_t> seq(static_cast<std::size_t>(T + 1));
    for (std::int64_t t = 0; t <= T; ++t)
      seq[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(ids.below(static_cast<std::uint64_t>(i * (T + 1) + t),
                                                                             static_cast<std::uint64_t>(V)));
    for (std::int64_t t = 0; t < T; ++t) {
      const auto at = static_cast<std::size_t>(i * T + t);
      d.x[at] = t < length ? static_cast<float>(seq[static_cast<std::size_t>(t)]) : 0.0f;
      d.y[at] = t < length ? seq[static_cast<std::size_t>(t + 1)] : kIgnoredTarget;
    }
  }
  return d;
}

// A sample's shape as the models see it, as the trainer gives it: (C, H, W) for images, else flat.
inline Shape sample_shape(const Dataset& d) {
  if (d.height == 0) return {d.dim};
  return {d.dim / (std::int64_t{d.height} * d.width), d.height, d.width};
}

inline std::vector<std::int64_t> range(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

struct RigSpec {
  ModelSection model;
  std::int64_t micro = 8, chunk = 0;  // chunk 0: the whole micro-batch
  int accum = 1, world_size = 1, ranks = 1;
  ReduceMode reduce = ReduceMode::mpi;
  bool sync_bn = false;
  double smoothing = 0.0;
};

inline EngineSettings settings_for(const RigSpec& s) {
  EngineSettings es;
  es.plan = BatchPlan{s.world_size, s.micro, s.accum, s.micro * s.accum * s.world_size};
  es.chunk = s.chunk > 0 ? s.chunk : s.micro;
  es.deterministic = s.reduce == ReduceMode::deterministic;
  es.sync_bn = s.sync_bn;
  return es;
}

inline ReduceLayout layout_for(const Model& m, const RigSpec& s) {
  ReduceLayout rl;
  rl.world_size = s.world_size;
  rl.rank_count = s.ranks;
  rl.num_params = m.num_params();
  for (const ParamTensor& t : m.tensors()) rl.tensors.emplace_back(t.offset, t.size);
  return rl;
}

// A model, its engine and this process's replicas (identically initialised), as Run sets them up.
struct Rig {
  Rig(const RigSpec& spec, const Dataset& data)
      : model(spec.model, sample_shape(data), data.classes),
        reducer(make_reducer(spec.reduce, MPI_COMM_WORLD, layout_for(model, spec))),
        engine(model, data, *reducer, settings_for(spec)),
        replicas(static_cast<std::size_t>(spec.ranks)),
        micro(spec.micro),
        accum(spec.accum),
        // As the step loop sets it for a classifier: per-rank mean in the mpi mode, unscaled partials in
        // the deterministic one.
        grad_scale(spec.reduce == ReduceMode::deterministic ? 1.0f : 1.0f / static_cast<float>(spec.micro * spec.accum)) {
    for (std::size_t k = 0; k < replicas.size(); ++k) {
      Replica& r = replicas[k];
      r.rank = static_cast<int>(k);
      engine.allocate(r);
      model.init_parameters(r.params, kSeed);
      model.init_buffers(r.buffers);
      r.knobs.loss.label_smoothing = spec.smoothing;
      r.knobs.dropout_seed = kSeed;
    }
  }

  // One optimizer step's forward and backward; replica k's micro-step j uses samples[k][j*micro, (j+1)*micro).
  void run_step(std::int64_t step, const std::vector<std::vector<std::int64_t>>& samples) {
    for (Replica& r : replicas) {
      std::fill(r.grads.begin(), r.grads.end(), 0.0f);
      std::fill(r.loss_parts.begin(), r.loss_parts.end(), 0.0);
      r.loss_sum = 0.0;
      r.correct = 0;
    }
    for (int j = 0; j < accum; ++j) {
      for (std::size_t k = 0; k < replicas.size(); ++k)
        std::copy_n(samples[k].begin() + j * micro, micro, replicas[k].samples.begin());
      engine.run_micro(replicas, step, j, grad_scale, nullptr);
    }
  }

  // The reducer's sum over all replicas and slots / divisor, into the first num_params floats of each.
  void reduce(double divisor) {
    std::vector<std::span<float>> spans;
    for (Replica& r : replicas) spans.emplace_back(r.grads);
    reducer->allreduce_gradients(spans, engine.grad_parts(), divisor);
  }

  std::span<const float> grad(const Replica& r, std::size_t slot = 0) const {
    return {r.grads.data() + slot * model.num_params(), model.num_params()};
  }

  Model model;
  std::unique_ptr<Reducer> reducer;
  StepEngine engine;
  std::vector<Replica> replicas;
  std::int64_t micro;
  int accum;
  float grad_scale;
};

}  // namespace divsim::test
