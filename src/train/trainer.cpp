#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/reducer.hpp"
#include "config/options.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "model/mlp.hpp"
#include "optim/clip.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "record/environment.hpp"
#include "record/output_path.hpp"
#include "record/trajectory_writer.hpp"
#include "train/batch_plan.hpp"
#include "train/step_engine.hpp"
#ifdef DIVSIM_HAVE_CUDA
#include "gpu_engine.hpp"
#endif

namespace divsim {
namespace {

using Clock = std::chrono::steady_clock;

struct ProcessLayout {
  int process = 0, processes = 1;
  int world_size = 1;              // logical ranks
  int rank_begin = 0, rank_count = 1;
};

ProcessLayout layout_processes(const RunConfig& cfg, MPI_Comm comm) {
  ProcessLayout p;
  MPI_Comm_rank(comm, &p.process);
  MPI_Comm_size(comm, &p.processes);
  const std::int64_t w = cfg.dist.world_size == 0 ? p.processes : cfg.dist.world_size;
  if (w % p.processes != 0)
    throw ConfigError("dist.world_size", std::to_string(w) + " logical ranks cannot be spread evenly over " +
                                             std::to_string(p.processes) + " MPI processes (needs a multiple)");
  p.world_size = static_cast<int>(w);
  p.rank_count = p.world_size / p.processes;
  p.rank_begin = p.process * p.rank_count;
  return p;
}

// Deterministic chunk size. It must be the same at every world size to be compared, so the automatic
// choice depends only on the global micro-batch: the largest c <= 16 that divides the per-rank
// micro-batch of every world size in {1,2,3,4,6,8} that divides the global micro-batch.
std::int64_t deterministic_chunk(const RunConfig& cfg, const BatchPlan& plan) {
  std::int64_t c = cfg.dist.det_chunk;
  if (c == 0) {
    const std::int64_t g = plan.micro_batch * plan.world_size;
    std::int64_t l = 1;
    for (std::int64_t d : {2, 3, 4, 6, 8})
      if (g % d == 0) l = std::lcm(l, d);
    const std::int64_t base = cfg.batch.per_rank > 0 ? plan.micro_batch : g / l;
    c = 1;
    for (std::int64_t d = 16; d >= 1; --d)
      if (base % d == 0) {
        c = d;
        break;
      }
  }
  if (plan.micro_batch % c != 0)
    throw ConfigError("dist.det_chunk", std::to_string(c) + " does not divide the per-rank micro-batch " +
                                            std::to_string(plan.micro_batch) + " at world size " +
                                            std::to_string(plan.world_size) + "; choose a divisor of it");
  return c;
}

std::string iso_time_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Copies logical rank 0's values of `field` to every replica (rank 0 lives on process 0).
template <class Field>
void broadcast_from_rank0(std::vector<Replica>& replicas, Field field, MPI_Comm comm) {
  std::vector<float>& src = replicas[0].*field;
  broadcast(src.data(), static_cast<int>(src.size()), MPI_FLOAT, 0, comm);
  for (std::size_t k = 1; k < replicas.size(); ++k) replicas[k].*field = src;
}

class Progress {
 public:
  Progress(bool enabled, std::int64_t total) : enabled_(enabled), total_(total), start_(Clock::now()), last_(start_) {}
  void update(std::int64_t done, double loss) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = static_cast<double>(done) / std::max(secs, 1e-9);
    std::fprintf(stderr, "step %lld/%lld  loss %.4f  %.1f steps/s  ETA %.0fs\n", static_cast<long long>(done),
                 static_cast<long long>(total_), loss, rate, static_cast<double>(total_ - done) / std::max(rate, 1e-9));
  }

 private:
  bool enabled_;
  std::int64_t total_;
  Clock::time_point start_, last_;
};

// Runs `fn` on every process; if it threw anywhere, every process throws SetupFailure (collectively
// agreed, so no process is left waiting in a later collective).
template <class Fn>
void collectively(MPI_Comm comm, Fn&& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int first_failing = error ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  if (first_failing == size) return;
  int code = error ? exit_code_for(error) : 0;
  MPI_Bcast(&code, 1, MPI_INT, first_failing, comm);
  std::string message = "set-up failed on rank " + std::to_string(first_failing);
  if (rank == first_failing) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
  }
  throw SetupFailure(message, code, rank == first_failing);
}

}  // namespace

int exit_code_for(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const SetupFailure& f) {
    return f.exit_code();
  } catch (const ConfigError&) {
    return 2;
  } catch (const DataError&) {
    return 2;
  } catch (const IoError&) {
    return 3;
  } catch (...) {
    return 1;
  }
}


// Everything one process needs for the run, built (and validated) before the output file exists.
class Run {
 public:
  Run(const RunConfig& config, MPI_Comm comm);
  std::unique_ptr<TrajectoryWriter> open_output() const;
  RunSummary train(TrajectoryWriter& writer);

 private:
  void local_gradient_norms(std::vector<double>& total, std::vector<double>& per_layer) const;

  const RunConfig& cfg_;
  MPI_Comm comm_;
  ProcessLayout proc_;
  BatchPlan plan_;
  DataSplits data_;
  Mlp model_;
  bool deterministic_ = false;
  double divisor_ = 1.0;
  std::unique_ptr<Sampler> sampler_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Engine> engine_;
  std::vector<Replica> replicas_;
  // Deterministic mode with the distributed (strided) sampler: a chunk is the strided set of global
  // positions a rank owns at every world size; this reorders a micro-batch so each chunk is contiguous.
  std::vector<std::size_t> chunk_order_;
  std::vector<std::int64_t> reorder_scratch_;
};

Run::Run(const RunConfig& config, MPI_Comm comm)
    : cfg_(config),
      comm_(comm),
      proc_(layout_processes(config, comm)),
      plan_(plan_batches(config, proc_.world_size)),
      data_(load_data(config.data, config.run.seed)),
      model_(config.model, data_.train.dim, data_.train.classes) {
  check_output_path(cfg_.output_path(), cfg_.run.overwrite);
  const ReduceMode mode = parse_reduce_mode(cfg_.dist.reduce);
  deterministic_ = mode == ReduceMode::deterministic;
  if (cfg_.data.augment && data_.train.height == 0)
    throw ConfigError("data.augment", "augmentation needs image data (data.source=fashion-mnist)");

  EngineSettings es;
  es.plan = plan_;
  es.deterministic = deterministic_;
  es.chunk = deterministic_ ? deterministic_chunk(cfg_, plan_) : plan_.micro_batch;
  es.sync_bn = cfg_.dist.sync_bn;
  es.augment = cfg_.data.augment;
  es.label_smoothing = cfg_.loss.label_smoothing;
  es.seed = cfg_.run.seed;
  // PyTorch: each rank's loss is the mean over its micro-batch divided by accum_steps, and DDP divides
  // the summed gradients by W. Deterministic mode sums unscaled partials and divides once at the end.
  es.grad_scale = deterministic_ ? 1.0f : static_cast<float>(1.0 / static_cast<double>(plan_.per_rank_step()));
  divisor_ = deterministic_ ? static_cast<double>(plan_.global_batch) : proc_.world_size;

  try {
    sampler_ = std::make_unique<Sampler>(
        cfg_.sampler.mode == "global_batch" ? SamplerMode::global_batch : SamplerMode::distributed,
        SamplerShape{data_.train.n, proc_.world_size, plan_.micro_batch, plan_.accum_steps, cfg_.batch.drop_last,
                     cfg_.sampler.shuffle, cfg_.sampler.seed});
  } catch (const std::invalid_argument& e) {
    throw ConfigError("batch.global", e.what());
  }
  steps_per_epoch_ = sampler_->steps_per_epoch();
  if (deterministic_ && cfg_.sampler.mode == "distributed" && es.chunk < plan_.micro_batch) {
    // Local row j holds global position r + W*j of its micro-window; chunk q of this rank is the rows
    // q + t*(mb/c), t = 0..c-1, i.e. positions spaced mb*W/c apart: the same set at every W.
    const auto mb = static_cast<std::size_t>(plan_.micro_batch), c = static_cast<std::size_t>(es.chunk);
    for (std::size_t q = 0; q < mb / c; ++q)
      for (std::size_t t = 0; t < c; ++t) chunk_order_.push_back(q + t * (mb / c));
    reorder_scratch_.resize(mb);
  }
  total_steps_ = cfg_.train.steps > 0 ? cfg_.train.steps : cfg_.train.epochs * steps_per_epoch_;

  ReduceLayout rl;
  rl.world_size = proc_.world_size;
  rl.rank_begin = proc_.rank_begin;
  rl.rank_count = proc_.rank_count;
  rl.num_params = model_.num_params();
  rl.bucket_cap_mb = cfg_.dist.bucket_cap_mb;
  for (const ParamTensor& t : model_.tensors()) rl.tensors.emplace_back(t.offset, t.size);
  reducer_ = make_reducer(mode, comm_, rl);
  if (cfg_.run.device == "cuda") {
#ifdef DIVSIM_HAVE_CUDA
    engine_ = make_gpu_engine(model_, data_.train, *reducer_, es, proc_.process, comm_);
#else
    throw ConfigError("run.device", "this divsim was built without the GPU backend (configure with -DDIVSIM_CUDA=ON)");
#endif
  } else {
    engine_ = std::make_unique<StepEngine>(model_, data_.train, *reducer_, es);
  }

  replicas_.resize(static_cast<std::size_t>(proc_.rank_count));
  for (int k = 0; k < proc_.rank_count; ++k) {
    Replica& r = replicas_[static_cast<std::size_t>(k)];
    r.rank = proc_.rank_begin + k;
    engine_->allocate(r);
    model_.init_parameters(r.params, cfg_.run.seed);
    model_.init_buffers(r.buffers);
    r.optimizer = make_optimizer(cfg_.optim, model_.num_params());
    r.matmul = parse_matmul_format(cfg_.precision.matmul);
  }
}

std::unique_ptr<TrajectoryWriter> Run::open_output() const {
  TrajectoryLayout tl;
  tl.world_size = proc_.world_size;
  tl.rank_begin = proc_.rank_begin;
  tl.rank_count = proc_.rank_count;
  tl.samples_per_step = plan_.per_rank_step();
  tl.record_samples = cfg_.record.samples;
  for (const Layer& l : model_.layers()) tl.layer_names.push_back(l.name);
  tl.chunk_steps = cfg_.record.chunk_steps;
  tl.flush_every = cfg_.record.flush_every;
  RootAttributes attrs = environment_attributes(comm_);
  attrs.config = to_ini(cfg_);
  std::string created = proc_.process == 0 ? iso_time_utc() : std::string();
  created.resize(32);
  MPI_Bcast(created.data(), 32, MPI_CHAR, 0, comm_);
  attrs.created = created.c_str();
  attrs.extra["data"] = data_.description;
  return std::make_unique<TrajectoryWriter>(comm_, cfg_.output_path(), cfg_.run.overwrite, tl, attrs,
                                            std::vector<FaultRow>{});
}

// The rank's own gradient (mean over its samples of the step) before any communication: total and
// per-layer L2 norms. Deterministic mode keeps unscaled chunk partials, summed here.
void Run::local_gradient_norms(std::vector<double>& total, std::vector<double>& per_layer) const {
  const std::size_t L = model_.layers().size(), np = model_.num_params();
  const int parts = engine_->grad_parts();
  const double scale = deterministic_ ? 1.0 / static_cast<double>(plan_.per_rank_step()) : 1.0;
  std::fill(per_layer.begin(), per_layer.end(), 0.0);
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    const std::vector<float>& g = replicas_[k].grads;
    double sum = 0.0;
    for (const ParamTensor& t : model_.tensors()) {
      double sq = 0.0;
      for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
        double v = 0.0;
        for (int p = 0; p < parts; ++p) v += g[static_cast<std::size_t>(p) * np + i];
        v *= scale;
        sq += v * v;
      }
      per_layer[k * L + t.layer_index] += sq;
      sum += sq;
    }
    for (std::size_t l = 0; l < L; ++l) per_layer[k * L + l] = std::sqrt(per_layer[k * L + l]);
    total[k] = std::sqrt(sum);
  }
}

RunSummary Run::train(TrajectoryWriter& writer) {
  if (cfg_.dist.broadcast_init) broadcast_from_rank0(replicas_, &Replica::params, comm_);
  const std::size_t L = model_.layers().size(), R = replicas_.size(), np = model_.num_params();
  const auto parts = static_cast<std::size_t>(engine_->grad_parts());

  std::vector<double> loss(R), gnorm_local(R), gnorm(R), pnorm(R), lr(R), scale(R, 1.0);
  std::vector<std::uint64_t> phash(R);
  std::vector<std::int64_t> samples(R * static_cast<std::size_t>(plan_.per_rank_step()));
  std::vector<double> loss_parts(R * parts);
  std::vector<std::span<float>> grad_spans;
  for (Replica& r : replicas_) grad_spans.emplace_back(r.grads);
  LayerStatsBuffer stats{std::vector<double>(R * L * kStatCount), std::vector<double>(R * L * kStatCount),
                         std::vector<double>(R * L)};
  std::vector<double> eval_loss(R), eval_acc(R);

  Progress progress(proc_.process == 0 && !cfg_.quiet, total_steps_);
  const auto t0 = Clock::now();
  for (std::int64_t step = 0; step < total_steps_; ++step) {
    const std::int64_t epoch = step / steps_per_epoch_, in_epoch = step % steps_per_epoch_;
    if (step == 0 || in_epoch == 0) sampler_->set_epoch(epoch);
    const bool record_layers = cfg_.record.layers_every > 0 && step % cfg_.record.layers_every == 0;

    for (Replica& r : replicas_) {
      std::fill(r.grads.begin(), r.grads.end(), 0.0f);
      std::fill(r.loss_parts.begin(), r.loss_parts.end(), 0.0);
      r.loss_sum = 0.0;
      r.correct = 0;
    }
    for (int micro = 0; micro < plan_.accum_steps; ++micro) {
      for (Replica& r : replicas_) {
        sampler_->micro_batch(r.rank, in_epoch, micro, r.samples);
        std::copy(r.samples.begin(), r.samples.end(), r.step_samples.begin() + micro * plan_.micro_batch);
        if (!chunk_order_.empty()) {
          for (std::size_t i = 0; i < chunk_order_.size(); ++i) reorder_scratch_[i] = r.samples[chunk_order_[i]];
          std::copy(reorder_scratch_.begin(), reorder_scratch_.end(), r.samples.begin());
        }
      }
      engine_->run_micro(replicas_, step, micro, record_layers && micro == 0 ? &stats : nullptr);
    }

    local_gradient_norms(gnorm_local, stats.grad_norm);
    for (std::size_t k = 0; k < R; ++k) {
      loss[k] = replicas_[k].loss_sum / static_cast<double>(plan_.per_rank_step());
      std::copy(replicas_[k].loss_parts.begin(), replicas_[k].loss_parts.end(),
                loss_parts.begin() + static_cast<std::ptrdiff_t>(k * parts));
    }
    double global_loss = 0.0;
    reducer_->sum_statistics(loss_parts, static_cast<int>(parts), std::span<double>(&global_loss, 1));
    global_loss /= static_cast<double>(plan_.global_batch);

    reducer_->allreduce_gradients(grad_spans, static_cast<int>(parts), divisor_);

    for (std::size_t k = 0; k < R; ++k) {
      Replica& r = replicas_[k];
      const std::span<float> g(r.grads.data(), np);
      clip_grad_norm(g, cfg_.optim.clip_norm);
      gnorm[k] = l2_norm(g);
      lr[k] = scheduled_lr(cfg_.schedule, cfg_.optim.lr, step, total_steps_);
      r.optimizer->step(r.params, g, lr[k]);
    }
    // DDP's broadcast_buffers: rank 0's BatchNorm running statistics replace everyone's.
    if (cfg_.dist.broadcast_buffers && model_.num_buffers() > 0)
      broadcast_from_rank0(replicas_, &Replica::buffers, comm_);

    for (std::size_t k = 0; k < R; ++k) {
      pnorm[k] = l2_norm(replicas_[k].params);
      phash[k] = hash_bits(replicas_[k].params);
      std::copy(replicas_[k].step_samples.begin(), replicas_[k].step_samples.end(),
                samples.begin() + static_cast<std::ptrdiff_t>(k * replicas_[k].step_samples.size()));
    }
    writer.append_train(TrainRow{step, global_loss, loss, gnorm_local, gnorm, pnorm, lr, scale, phash, samples});
    if (record_layers) writer.append_layers(step, stats.forward, stats.backward, stats.grad_norm);

    const bool last = step + 1 == total_steps_;
    if (last || (cfg_.train.eval_every > 0 && (step + 1) % cfg_.train.eval_every == 0)) {
      for (std::size_t k = 0; k < R; ++k) {
        const auto e = engine_->evaluate(replicas_[k], data_.test);
        eval_loss[k] = e.loss;
        eval_acc[k] = e.accuracy;
      }
      writer.append_eval(step, eval_loss, eval_acc);
    }
    progress.update(step + 1, global_loss);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  writer.finish();

  RunSummary s;
  s.steps = total_steps_;
  s.world_size = proc_.world_size;
  s.seconds = seconds;
  s.output = cfg_.output_path();
  double lo[2] = {*std::min_element(eval_loss.begin(), eval_loss.end()), *std::min_element(eval_acc.begin(), eval_acc.end())};
  double hi[2] = {*std::max_element(eval_loss.begin(), eval_loss.end()), *std::max_element(eval_acc.begin(), eval_acc.end())};
  MPI_Allreduce(MPI_IN_PLACE, lo, 2, MPI_DOUBLE, MPI_MIN, comm_);
  MPI_Allreduce(MPI_IN_PLACE, hi, 2, MPI_DOUBLE, MPI_MAX, comm_);
  s.eval_loss_min = lo[0];
  s.eval_acc_min = lo[1];
  s.eval_loss_max = hi[0];
  s.eval_acc_max = hi[1];
  return s;
}

RunSummary run_training(const RunConfig& cfg, MPI_Comm comm) {
  // Set-up and the output file: failures are agreed collectively (clean exit, one message).
  std::unique_ptr<Run> run;
  collectively(comm, [&] { run = std::make_unique<Run>(cfg, comm); });
  std::unique_ptr<TrajectoryWriter> writer;
  collectively(comm, [&] { writer = run->open_output(); });
  return run->train(*writer);
}

}  // namespace divsim
