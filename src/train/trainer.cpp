#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <numeric>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/mpi_check.hpp"
#include "comm/reduce_plan.hpp"
#include "comm/reducer.hpp"
#include "config/options.hpp"
#include "data/dataset.hpp"
#include "data/h5_dataset.hpp"
#include "data/sampler.hpp"
#include "model/gemm_backend.hpp"
#include "model/activation_stats.hpp"
#include "model/model.hpp"
#include "numerics/simd.hpp"
#include "optim/clip.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "record/output_path.hpp"
#include "record/trajectory_writer.hpp"
#include "train/batch_plan.hpp"
#include "comm/ring.hpp"
#include "faults/fault_set.hpp"
#include "train/checkpoint.hpp"
#include "train/memory_budget.hpp"
#include "train/run_edge.hpp"
#include "train/run_output.hpp"
#include "train/step_engine.hpp"
#include "train/termination.hpp"
#include "train/watchdog.hpp"
#ifdef DIVSIM_HAVE_CUDA
#include "gpu_engine.hpp"
#include "nccl_reducer.hpp"
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

// The per-rank micro-batch at each world size a deterministic run stays comparable with (the chunk must
// divide them all), as planned for that W; none with batch.per_rank fixed.
std::vector<std::int64_t> comparable_micro_batches(const RunConfig& cfg) {
  std::vector<std::int64_t> out;
  if (cfg.batch.per_rank != 0) return out;
  for (const int w : kComparableWorldSizes) {
    try {
      out.push_back(plan_batches(cfg, w).micro_batch);
    } catch (const ConfigError&) {
      // this world size cannot split the batch: nothing to stay invariant with
    }
  }
  return out;
}

// Each pair of sibling leaves is summed by the engine: the chunk of the higher slot adds its gradient
// onto the lower one's (computed before it: slots are in the order the chunks are computed), which is
// the tree's first sum bit for bit where the products accumulate with one rounding per element
// (accumulate_adds_rounded_product: probed for the chunk's weight-gradient shapes). It spares the
// higher slot's clearing and the rank's first level of sums; the reducer sums the lower slots.
void pair_tree_siblings(ReduceLayout& layout, EngineSettings& es, const Model& model) {
  const std::vector<int>& slots = layout.tree_slots;
  if (slots.size() < 2) return;
  for (const Node& n : model.nodes())
    for (const MatrixProduct& m : n.layer->products())
      if (!accumulate_adds_rounded_product(es.chunk * m.rows_per_sample, m.out, m.in)) return;
  es.grad_slot.resize(slots.size());
  std::iota(es.grad_slot.begin(), es.grad_slot.end(), 0);
  for (std::size_t j = 0; j < slots.size(); j += 2)
    es.grad_slot[static_cast<std::size_t>(std::max(slots[j], slots[j + 1]))] = std::min(slots[j], slots[j + 1]);
  layout.tree_siblings_summed = true;
}

// Per layer: the whole micro-batch for a layer whose forward and input-gradient products all give a row
// the same bits in one product as in chunk-sized ones (probed with this process's kernels), else 0.
std::vector<std::int64_t> product_rows(const Model& model, std::int64_t micro_batch, std::int64_t chunk) {
  std::vector<std::int64_t> rows;
  if (micro_batch == chunk) return rows;  // one chunk: its products are the micro-batch's already
  for (const Node& n : model.nodes()) {
    const auto& products = n.layer->products();
    const bool whole = !products.empty() && std::all_of(products.begin(), products.end(), [&](const MatrixProduct& m) {
      return rows_do_not_depend_on_row_count(micro_batch * m.rows_per_sample, chunk * m.rows_per_sample, m.in, m.out);
    });
    rows.push_back(whole ? micro_batch : 0);
  }
  return rows;
}

// A sample's shape as the models see it: (channels, height, width) for images, flat features otherwise.
Shape sample_shape(const Dataset& d) {
  if (d.height == 0) return {d.dim};
  return {d.dim / (d.height * d.width), d.height, d.width};
}

class Progress {
 public:
  Progress(bool enabled, std::int64_t total, std::int64_t first)
      : enabled_(enabled), total_(total), first_(first), start_(Clock::now()), last_(start_) {}
  void update(std::int64_t done, double loss) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = static_cast<double>(done - first_) / std::max(secs, 1e-9);
    std::fprintf(stderr, "step %lld/%lld  loss %.4f  %.1f steps/s  ETA %.0fs\n", static_cast<long long>(done),
                 static_cast<long long>(total_), loss, rate, static_cast<double>(total_ - done) / std::max(rate, 1e-9));
  }

 private:
  bool enabled_;
  std::int64_t total_, first_;
  Clock::time_point start_, last_;
};

}  // namespace

// The synthetic sets are sized by the configuration, an HDF5 file's by its shapes and a text file's by
// its bytes (each character becomes at least a float32 input and an int32 target): refuse before
// allocating what cannot fit.
DataSplits load_data_within(const RunConfig& cfg, const MemoryBudget& budget) {
  if (cfg.data.source == DataSource::hdf5)
    require_fits(h5_splits_bytes(cfg.data.path, cfg.data.train_size, cfg.data.test_size), budget, "data.path",
                 "the data set in " + cfg.data.path + " (as float32)");
  if (cfg.data.source == DataSource::synthetic) {
    const auto samples = static_cast<std::uint64_t>(cfg.data.synthetic_train + cfg.data.synthetic_test);
    const auto floats = static_cast<std::uint64_t>(cfg.data.synthetic_features) + 1;  // features, label
    require_fits(samples * floats * sizeof(float), budget, "data.synthetic_train",
                 "the synthetic data set (data.synthetic_train + data.synthetic_test samples of "
                 "data.synthetic_features features)");
  }
  if (cfg.data.source == DataSource::text) {
    std::error_code ec;
    const std::uintmax_t bytes = std::filesystem::file_size(cfg.data.path, ec);
    if (!ec)
      require_fits(static_cast<std::uint64_t>(bytes) * (sizeof(float) + sizeof(std::int32_t)), budget, "data.path",
                   "the sequences of " + cfg.data.path);
  }
  return load_data(cfg.data, cfg.run.seed, cfg.model.block_size);
}

// Everything one process needs for the run, built (and validated) before the output file exists.
class Run {
 public:
  Run(const RunConfig& config, MPI_Comm comm, std::uint64_t nonce, int processes_on_node);
  std::unique_ptr<TrajectoryWriter> open_output() const;
  RunSummary train(TrajectoryWriter& writer, Watchdog& watchdog);
  const ProcessLayout& layout() const { return proc_; }

 private:
  // Set-up, in the order the constructor runs it.
  void check_model_fits_data() const;
  void find_resume_checkpoint();
  EngineSettings engine_settings() const;
  void make_sampler(std::int64_t chunk);  // also the step counts and the chunk order
  void make_reducer_and_engine(EngineSettings& es);
  void make_replicas();

  void reset_knobs(Replica& r, std::int64_t step) const;
  void local_gradient_norms(std::vector<double>& total, std::vector<double>& per_layer);
  void own_gradient(Replica& r);  // r.own_grad = the rank's mean gradient before the reduction
  void plan_samples(std::int64_t step, std::int64_t epoch, std::int64_t in_epoch);
  void micro_samples(int micro);
  double normalise_loss();
  // The stages of one step, in the order train() runs them.
  void begin_step(std::int64_t step);
  void compute_gradients(std::int64_t step);
  void local_gradients(std::int64_t step);
  void reduce();
  void update_parameters(std::int64_t step);
  void record_step(TrajectoryWriter& writer, std::int64_t step);
  void evaluate(TrajectoryWriter& writer, std::int64_t step);
  bool stop_or_checkpoint(TrajectoryWriter& writer, std::int64_t step);  // true: stop after this step

  void checkpoint(TrajectoryWriter& writer, std::int64_t step);
  bool handle_nonfinite(std::int64_t step);
  void broadcast_buffers();
  std::uint64_t replica_bytes() const;  // a lower bound on one replica's memory

  const RunConfig& cfg_;
  MPI_Comm comm_;
  ProcessLayout proc_;
  BatchPlan plan_;
  MemoryBudget memory_;
  DataSplits data_;
  Model model_;
  // The step's loss normalisation (normalise_loss) and how the reduction mode splits it.
  double rank_scale_ = 1.0;
  Normalisation norm_;
  std::vector<double> counted_;  // per replica: the targets its samples of the step count
  double lr_factor_;  // batch.lr_scaling
  std::unique_ptr<Sampler> sampler_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  ReduceLayout reduce_layout_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<FaultSet> faults_;
  std::vector<Replica> replicas_;
  std::vector<std::span<float>> grad_spans_;
  int reduce_parts_ = 1;  // gradient parts per rank once the reducer has combined its own (every step)
  std::vector<std::vector<float>> ring_copies_;
  struct OrderRow {
    double participates, cap, rotation;
  };
  std::vector<OrderRow> order_rows_, all_order_rows_;  // reduce(): this process's ranks, all ranks
  std::vector<RingOrder> orders_;                       // reduce(): the distinct extra ring orders
  std::vector<float> buffer_scratch_;  // pre-reduction gradients, for ranks with their own ring
  struct PendingEvent {
    std::int64_t step;
    int rank;
    std::string kind, detail;
  };
  std::vector<PendingEvent> setup_events_;
  EventSink log_;
  bool stop_requested_ = false;
  std::optional<CheckpointManifest> resume_;  // the checkpoint this run continues from
  std::int64_t layer_rows_ = 0, eval_rows_ = 0;  // trajectory rows written (for checkpoints)
  std::vector<char> nonfinite_seen_;  // per local rank: a nonfinite event was logged (record mode)
  // Deterministic mode with the distributed (strided) sampler: a chunk is the strided set of global
  // positions a rank owns at every world size; this reorders a micro-batch so each chunk is contiguous.
  std::vector<std::size_t> chunk_order_;
  std::vector<double> part_sums_;  // a block of a rank's gradient summed over its chunk partials

  // What the stages of a step hand each other and record, per local replica (sized once in train()).
  struct StepResults {
    std::int64_t epoch = 0, in_epoch = 0;
    bool record_layers = false;  // layer statistics this step
    double targets = 0.0;        // targets of the global batch (normalise_loss)
    double global_loss = 0.0;
    std::vector<double> loss, grad_norm_local, grad_norm, param_norm, lr, loss_scale, loss_parts;
    std::vector<std::uint64_t> param_hash;
    std::vector<std::int64_t> samples;
    std::vector<char> local_overflow;  // AMP with a local overflow check: this rank's own gradient overflowed
    LayerStatsBuffer stats;
    std::vector<double> eval_loss, eval_acc;
  };
  StepResults now_;
  GradScaler scaler_;
  double eval_seconds_ = 0.0;  // evaluations are not counted in steps/s
  std::int64_t first_step_ = 0;  // of this start (a resumed run's first step sets the sampler's epoch)
};

Run::Run(const RunConfig& config, MPI_Comm comm, std::uint64_t nonce, int processes_on_node)
    : cfg_(config),
      comm_(comm),
      proc_(layout_processes(config, comm)),
      plan_(plan_batches(config, proc_.world_size)),
      memory_(memory_budget(processes_on_node)),
      data_(load_data_within(config, memory_)),
      model_(config.model, sample_shape(data_.train), data_.train.classes),
      lr_factor_(config.batch.lr_scaling == LrScaling::linear
                     ? static_cast<double>(plan_.global_batch) / static_cast<double>(config.batch.base_global)
                     : 1.0),
      scaler_(config.precision.loss_scale_growth_interval) {
  check_model_fits_data();
  find_resume_checkpoint();
  EngineSettings es = engine_settings();
  make_sampler(es.chunk);
  FaultContext fault_context{cfg_, proc_.world_size, total_steps_, nonce};
  fault_context.model_has_batchnorm = model_.has_batch_statistics();
  fault_context.model_has_dropout = model_.has_style("dropout");
  faults_ = std::make_unique<FaultSet>(cfg_.faults, fault_context);
  make_reducer_and_engine(es);
  make_replicas();
  // Last, so that a mistyped setting or fault is reported as such, not as an output file in the way.
  check_output_path(cfg_.output_path(), cfg_.run.overwrite);
}

void Run::check_model_fits_data() const {
  require_fits(replica_bytes() * static_cast<std::uint64_t>(proc_.rank_count), memory_, "model.type",
               std::to_string(proc_.rank_count) + " replica(s) of the " + cfg_.model.type + " model's " +
                   std::to_string(model_.num_params()) +
                   " parameters (its sizes: model.hidden for the mlp, model.channels and blocks for the resnet, "
                   "model.dim and depth for the vit; dist.world_size / processes) with their gradients, optimizer "
                   "state and activations");
  if (model_.targets() != data_.train.targets)
    throw ConfigError("model.type", cfg_.model.type + " predicts " + std::to_string(model_.targets()) +
                                        " target(s) per sample, but the samples of data.source=" + std::string(name_of(cfg_.data.source)) +
                                        " have " + std::to_string(data_.train.targets) +
                                        (data_.train.targets > 1 ? " (sequences: use model.type=gpt)" : ""));
  if (cfg_.data.augment && data_.train.height == 0)
    throw ConfigError("data.augment", "augmentation needs image data (data.source=fashion-mnist, or hdf5 with [N, height, width] uint8 images)");
  if (model_.has_batch_statistics() && !cfg_.dist.sync_bn && plan_.micro_batch == 1)
    throw ConfigError("batch.global", "BatchNorm needs more than one sample per rank and micro-step (the per-rank "
                                         "micro-batch is 1 at world size " + std::to_string(proc_.world_size) +
                                         "); use dist.sync_bn=true or a larger batch.global");
}

void Run::find_resume_checkpoint() {
  if (cfg_.run.resume == ResumeMode::automatic) resume_ = find_checkpoint(cfg_.output_path());
  if (!resume_) return;
  if (resume_->world_size != proc_.world_size)
    throw ConfigError("run.resume", "the checkpoint in " + checkpoint_root(cfg_.output_path()) + " has world size " +
                                        std::to_string(resume_->world_size) + ", this run " + std::to_string(proc_.world_size));
  if (resume_->config != config_identity(cfg_))
    throw ConfigError("run.resume", "the checkpoint in " + checkpoint_root(cfg_.output_path()) +
                                        " was written with another configuration; resume with the same settings");
}

// Deterministic reduction needs of the engine a chunk whose bits every world size shares, and matrix
// products whose parameter-gradient rows are that chunk; the other modes take the whole micro-batch.
EngineSettings Run::engine_settings() const {
  const bool deterministic = cfg_.dist.reduce == ReduceMode::deterministic;
  EngineSettings es;
  es.plan = plan_;
  es.deterministic = deterministic;
  es.chunk = deterministic ? deterministic_chunk(cfg_.dist.det_chunk, plan_.micro_batch, plan_.world_size,
                                                 comparable_micro_batches(cfg_))
                           : plan_.micro_batch;
  es.sync_bn = cfg_.dist.sync_bn;
  es.augment = cfg_.data.augment;
  // A chunk's bits come only from its parameter gradients' products (their K is the chunk); the other
  // products may take the whole micro-batch where a row's bits do not change.
  if (deterministic && cfg_.run.device != Device::cuda) es.product_rows = product_rows(model_, plan_.micro_batch, es.chunk);
  return es;
}

void Run::make_sampler(std::int64_t chunk) {
  try {
    sampler_ = std::make_unique<Sampler>(
        cfg_.sampler.mode == SamplerMode::global_batch ? SamplerMode::global_batch : SamplerMode::distributed,
        SamplerShape{data_.train.n, proc_.world_size, plan_.micro_batch, plan_.accum_steps, cfg_.batch.drop_last,
                     cfg_.sampler.shuffle, cfg_.sampler.seed});
  } catch (const std::invalid_argument& e) {
    throw ConfigError("batch.global", e.what());
  }
  steps_per_epoch_ = sampler_->steps_per_epoch();
  total_steps_ = cfg_.train.steps > 0 ? cfg_.train.steps : cfg_.train.epochs * steps_per_epoch_;
  if (cfg_.sampler.mode == SamplerMode::distributed && chunk < plan_.micro_batch) {
    // Local row j holds global position r + W*j of its micro-window; chunk q of this rank is the rows
    // q + t*(mb/c), t = 0..c-1, i.e. positions spaced mb*W/c apart: the same set at every W.
    const auto mb = static_cast<std::size_t>(plan_.micro_batch), c = static_cast<std::size_t>(chunk);
    for (std::size_t q = 0; q < mb / c; ++q)
      for (std::size_t t = 0; t < c; ++t) chunk_order_.push_back(q + t * (mb / c));
  }
}

void Run::make_reducer_and_engine(EngineSettings& es) {
  reduce_layout_.world_size = proc_.world_size;
  reduce_layout_.rank_begin = proc_.rank_begin;
  reduce_layout_.rank_count = proc_.rank_count;
  reduce_layout_.num_params = model_.num_params();
  reduce_layout_.bucket_cap_mb = cfg_.dist.bucket_cap_mb;
  reduce_layout_.share_node_memory = cfg_.dist.shared_memory;
  reduce_layout_.arithmetic = {cfg_.dist.reduce_dtype, cfg_.dist.divide};
  for (const ParamTensor& t : model_.tensors()) reduce_layout_.tensors.emplace_back(t.offset, t.size);
  if (es.deterministic)
    plan_tree(reduce_layout_, cfg_.sampler.mode == SamplerMode::distributed, static_cast<std::size_t>(plan_.micro_batch / es.chunk),
              static_cast<std::size_t>(plan_.accum_steps));
  if (cfg_.run.device != Device::cuda && cfg_.dist.backend != CommBackend::nccl) pair_tree_siblings(reduce_layout_, es, model_);
  if (cfg_.dist.backend == CommBackend::nccl) {
#ifdef DIVSIM_HAVE_CUDA
    reducer_ = make_nccl_reducer(comm_, reduce_layout_);
#else
    throw ConfigError("dist.backend", "this divsim was built without NCCL (configure with -DDIVSIM_CUDA=ON)");
#endif
  } else {
    reducer_ = make_reducer(cfg_.dist.reduce, comm_, reduce_layout_);
  }
  if (cfg_.run.device == Device::cuda) {
#ifdef DIVSIM_HAVE_CUDA
    engine_ = make_gpu_engine(model_, data_.train, *reducer_, es, proc_.process, comm_);
#else
    throw ConfigError("run.device", "this divsim was built without the GPU backend (configure with -DDIVSIM_CUDA=ON)");
#endif
  } else {
    engine_ = std::make_unique<StepEngine>(model_, data_.train, *reducer_, es);
  }
}

// This process's replicas: gradient memory from the reducer, buffers from the engine, then the faults'
// set-up, the initial parameters, the optimizer, and on resume each rank's checkpoint.
void Run::make_replicas() {
  // Set-up events wait here until the output file exists.
  const EventSink setup_log = [this](std::int64_t step, int rank, const std::string& kind, const std::string& detail) {
    setup_events_.push_back({step, rank, kind, detail});
  };
  replicas_.resize(static_cast<std::size_t>(proc_.rank_count));
  counted_.assign(replicas_.size(), 0.0);
  order_rows_.resize(replicas_.size());
  all_order_rows_.resize(static_cast<std::size_t>(proc_.world_size));
  for (int k = 0; k < proc_.rank_count; ++k) {
    Replica& r = replicas_[static_cast<std::size_t>(k)];
    r.rank = proc_.rank_begin + k;
    r.grads.lend(reducer_->gradient_memory(k));
    engine_->allocate(r);
    r.init_seed = cfg_.run.seed;
    faults_->prepare(r, setup_log);
    model_.init_parameters(r.params, r.init_seed);
    model_.init_buffers(r.buffers);
    r.optimizer = make_optimizer(cfg_.optim, model_.num_params());
    r.loss_scale = cfg_.precision.amp == AmpMode::fp16 ? cfg_.precision.loss_scale_init : 1.0;
    grad_spans_.emplace_back(r.grads);
    if (resume_) {
      RankCheckpointExtra extra;
      read_rank_checkpoint(cfg_.output_path(), resume_->next_step - 1, r, extra);
      faults_->restore_rank_state(r.rank, extra.fault_last_active);
      nonfinite_seen_.resize(replicas_.size());
      nonfinite_seen_[static_cast<std::size_t>(k)] = extra.nonfinite_seen;
    }
  }
  if (resume_) setup_events_.clear();  // they are in the trajectory being replayed
}

std::uint64_t Run::replica_bytes() const {
  // Parameters and gradients, optimizer state (momentum; AdamW two moments), and for one micro-batch
  // each activation, its gradient and what the layers keep for backward.
  const std::uint64_t slots = 2 + (cfg_.optim.type == OptimizerType::adamw ? 2 : cfg_.optim.momentum > 0 ? 1 : 0);
  const auto activations =
      static_cast<std::uint64_t>(2 * model_.activation_floats() + model_.saved_floats_per_sample());
  return sizeof(float) * (slots * model_.num_params() + activations * static_cast<std::uint64_t>(plan_.micro_batch));
}

std::unique_ptr<TrajectoryWriter> Run::open_output() const {
  OutputPlan out{cfg_, comm_, proc_.process, {}, model_, data_, {}, resume_ ? &*resume_ : nullptr};
  TrajectoryLayout& tl = out.layout;
  tl.world_size = proc_.world_size;
  tl.rank_begin = proc_.rank_begin;
  tl.rank_count = proc_.rank_count;
  tl.samples_per_step = plan_.per_rank_step();
  tl.record_samples = cfg_.record.samples;
  for (const Node& n : model_.nodes()) tl.layer_names.push_back(n.layer->name());
  tl.chunk_steps = cfg_.record.chunk_steps;
  tl.flush_every = cfg_.record.flush_every;
  tl.schedule_lr = schedule_table(cfg_.schedule, cfg_.optim.lr * lr_factor_, total_steps_);
  for (const auto& f : faults_->rows()) out.faults.push_back({f.name, f.ranks, f.spec, f.start, f.stop, f.every, f.prob});
  return divsim::open_output(out);
}

// After step `step`: flush the trajectory so it holds every row the checkpoint claims, then save.
void Run::checkpoint(TrajectoryWriter& writer, std::int64_t step) {
  writer.flush();
  CheckpointManifest m;
  m.next_step = step + 1;
  m.world_size = proc_.world_size;
  m.train_rows = step + 1;
  m.layer_rows = layer_rows_;
  m.eval_rows = eval_rows_;
  m.config = config_identity(cfg_);
  std::vector<const Replica*> reps;
  std::vector<RankCheckpointExtra> extras;
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    reps.push_back(&replicas_[k]);
    extras.push_back({faults_->rank_state(replicas_[k].rank), k < nonfinite_seen_.size() && nonfinite_seen_[k]});
  }
  write_checkpoint(comm_, cfg_.output_path(), m, reps, extras);
}

// The configuration's settings for a rank; faults change them afterwards.
void Run::reset_knobs(Replica& r, std::int64_t step) const {
  RankKnobs& k = r.knobs;
  k = RankKnobs{};
  k.matmul = cfg_.precision.matmul;
  k.loss.asl = cfg_.loss.type == LossType::asl;
  k.loss.label_smoothing = cfg_.loss.label_smoothing;
  k.loss.gamma_pos = cfg_.loss.gamma_pos;
  k.loss.gamma_neg = cfg_.loss.gamma_neg;
  k.loss.margin = cfg_.loss.margin;
  k.dropout_seed = k.augment_seed = cfg_.run.seed;
  k.clip_norm = cfg_.optim.clip_norm;
  k.schedule_step = step;
}

namespace {

constexpr std::size_t kPartBlock = 1024;  // elements summed over the parts at a time (stays in L1)

// out[i] = sum over p of g[p * np + off + i] in double, p ascending: a rank's gradient from its chunk
// partials (deterministic mode). The part loop is outside the element loop so that both vectorise.
void sum_partials(const float* g, std::size_t parts, std::size_t np, std::size_t off, std::size_t n, double* out) {
  std::fill_n(out, n, 0.0);
  for (std::size_t p = 0; p < parts; ++p) {
    const float* gp = g + p * np + off;
    for (std::size_t i = 0; i < n; ++i) out[i] += gp[i];
  }
}

// Sum of (v[i] * scale)^2 in 8 lanes in a fixed pattern, folded in order.
DIVSIM_WIDE_VECTORS double scaled_sum_of_squares(const double* v, std::size_t n, double scale) {
  constexpr std::size_t kLanes = 8;
  double lane[kLanes] = {};
  const std::size_t body = n - n % kLanes;
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] += (v[i + k] * scale) * (v[i + k] * scale);
  for (std::size_t i = body; i < n; ++i) lane[i - body] += (v[i] * scale) * (v[i] * scale);
  for (std::size_t k = 1; k < kLanes; ++k) lane[0] += lane[k];
  return lane[0];
}

}  // namespace

// The rank's own gradient (mean over its samples of the step) before any communication: total and
// per-layer L2 norms. Deterministic mode: unscaled; the fixed-point sum keeps the chunk partials, summed
// here (the tree has summed them into the first already).
void Run::local_gradient_norms(std::vector<double>& total, std::vector<double>& per_layer) {
  const std::size_t L = model_.size(), np = model_.num_params();
  const auto parts = static_cast<std::size_t>(reduce_parts_);
  const double scale = norm_.own_scale;
  std::fill(per_layer.begin(), per_layer.end(), 0.0);
  part_sums_.resize(kPartBlock);
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    const GradientBuffer& g = replicas_[k].grads;
    const double unscale = scale / replicas_[k].loss_scale;
    double sum = 0.0;
    for (const ParamTensor& t : model_.tensors()) {
      double sq = 0.0;
      if (parts == 1) {
        sq = sum_of_squares(std::span<const float>(g.data() + t.offset, t.size), unscale);
      } else {
        for (std::size_t lo = 0; lo < t.size; lo += kPartBlock) {
          const std::size_t n = std::min(kPartBlock, t.size - lo);
          sum_partials(g.data(), parts, np, t.offset + lo, n, part_sums_.data());
          sq += scaled_sum_of_squares(part_sums_.data(), n, unscale);
        }
      }
      per_layer[k * L + t.layer_index] += sq;
      sum += sq;
    }
    for (std::size_t l = 0; l < L; ++l) per_layer[k * L + l] = std::sqrt(per_layer[k * L + l]);
    total[k] = std::sqrt(sum);
  }
}

void Run::own_gradient(Replica& r) {
  const std::size_t np = model_.num_params();
  r.own_grad.resize(np);
  std::copy_n(r.grads.begin(), np, r.own_grad.begin());
  const auto parts = static_cast<std::size_t>(reduce_parts_);
  const double scale = norm_.own_scale;
  if (parts == 1 && scale == 1.0) return;
  part_sums_.resize(kPartBlock);
  for (std::size_t lo = 0; lo < np; lo += kPartBlock) {
    const std::size_t n = std::min(kPartBlock, np - lo);
    sum_partials(r.grads.data(), parts, np, lo, n, part_sums_.data());
    for (std::size_t i = 0; i < n; ++i) r.own_grad[lo + i] = static_cast<float>(part_sums_[i] * scale);
  }
}

// Every replica's samples of the step, all micro-steps (a fault may choose them).
void Run::plan_samples(std::int64_t step, std::int64_t epoch, std::int64_t in_epoch) {
  for (int micro = 0; micro < plan_.accum_steps; ++micro)
    for (Replica& r : replicas_) {
      if (!faults_->plan_samples(SampleRequest{*sampler_, step, epoch, in_epoch, micro}, r))
        sampler_->micro_batch(r.rank, in_epoch, micro, r.samples);
      std::copy(r.samples.begin(), r.samples.end(), r.step_samples.begin() + micro * plan_.micro_batch);
    }
}

// Micro-step `micro`'s samples into each replica's `samples`, in the engine's chunk order.
void Run::micro_samples(int micro) {
  for (Replica& r : replicas_) {
    const auto first = r.step_samples.begin() + micro * plan_.micro_batch;
    if (chunk_order_.empty()) {
      std::copy_n(first, plan_.micro_batch, r.samples.begin());
      continue;
    }
    for (std::size_t i = 0; i < chunk_order_.size(); ++i) r.samples[i] = first[static_cast<std::ptrdiff_t>(chunk_order_[i])];
  }
}

// The loss of a step is the mean over every target of the global batch (the gradient too): a classifier
// counts one target per sample, a sequence model the positions that are not padding, whose total is
// summed over all ranks before the backward pass (as a token-normalised loss must be, or a rank with more
// padding would weigh more). PyTorch's DDP divides the summed gradients by W, so each rank scales its
// loss by W / targets; deterministic mode sums unscaled partials and divides by the targets at the end.
// Returns the step's targets.
double Run::normalise_loss() {
  const Dataset& d = data_.train;
  double local = 0.0;
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    std::int64_t c = 0;
    for (const std::int64_t s : replicas_[k].step_samples) c += d.counted(s);
    counted_[k] = static_cast<double>(c);
    local += counted_[k];
  }
  double targets = static_cast<double>(plan_.global_batch);
  if (d.targets > 1) {  // integer counts: the sum is exact in any order
    targets = local;
    allreduce_in_place(&targets, 1, MPI_DOUBLE, MPI_SUM, comm_);
  }
  rank_scale_ = static_cast<double>(proc_.world_size) / targets;
  norm_ = reducer_->normalisation(rank_scale_, targets, proc_.world_size);
  return targets;
}

// The gradient allreduce with its participation and ordering knobs. Ranks left out contribute zeros
// (adding +0 changes no sum) and the others divide by the number of participants; ranks with their own
// ring order take the sum of the same contributions summed in that order.
void Run::reduce() {
  const std::size_t np = model_.num_params();
  // Participation and ring orders are knobs only faults change: without faults every rank takes part
  // in the one reduction, and the step needs no collective to agree on that.
  int skipped = 0;
  orders_.clear();
  if (!faults_->empty()) {
    // Each rank's [participates, ring bucket cap, ring rotation], gathered in one collective: the
    // divisor counts participants, and all processes must run the same extra rings.
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      Replica& r = replicas_[k];
      if (!r.knobs.participates) std::fill(r.grads.begin(), r.grads.end(), 0.0f);
      order_rows_[k] = r.knobs.own_ring ? OrderRow{r.knobs.participates ? 1.0 : 0.0, r.knobs.ring_bucket_cap_mb,
                                                   static_cast<double>(r.knobs.ring_rotation)}
                                        : OrderRow{r.knobs.participates ? 1.0 : 0.0, 0.0, 0.0};
    }
    mpi_check(MPI_Allgather(order_rows_.data(), 3 * proc_.rank_count, MPI_DOUBLE, all_order_rows_.data(),
                            3 * proc_.rank_count, MPI_DOUBLE, comm_),
              "MPI_Allgather");
    for (const OrderRow& o : all_order_rows_) {
      skipped += o.participates == 0.0;
      const RingOrder ro{o.cap, static_cast<std::uint32_t>(o.rotation)};
      if (o.cap > 0.0 && std::find(orders_.begin(), orders_.end(), ro) == orders_.end()) orders_.push_back(ro);
    }
  }
  const double participants = static_cast<double>(proc_.world_size - skipped);
  const double divisor = norm_.divisor * participants / static_cast<double>(proc_.world_size);
  if (!orders_.empty()) {
    ring_copies_.resize(replicas_.size());
    for (std::size_t k = 0; k < replicas_.size(); ++k)
      ring_copies_[k].assign(replicas_[k].grads.begin(), replicas_[k].grads.begin() + static_cast<std::ptrdiff_t>(np));
  }

  reducer_->allreduce_gradients(grad_spans_, reduce_parts_, divisor);

  std::vector<std::span<float>> spans;
  const ReduceArithmetic& arithmetic = reduce_layout_.arithmetic;
  for (const RingOrder& order : orders_) {
    std::vector<std::vector<float>> copies = ring_copies_;
    spans.clear();
    for (auto& c : copies) spans.emplace_back(c);
    for (const std::span<float>& c : spans) arithmetic.before(c, divisor, proc_.world_size);
    RingAllreduce(comm_, reduce_layout_, order).sum(spans);
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      Replica& r = replicas_[k];
      if (!r.knobs.own_ring || !(RingOrder{r.knobs.ring_bucket_cap_mb, r.knobs.ring_rotation} == order)) continue;
      arithmetic.after(spans[k], divisor, proc_.world_size);
      std::copy_n(copies[k].begin(), np, r.grads.begin());
    }
  }
  for (Replica& r : replicas_) {
    r.grads.reduced(divisor);
    if (r.knobs.participates) {
      if (!r.last_grad.empty()) std::copy_n(r.grads.begin(), np, r.last_grad.begin());
      continue;
    }
    const bool stale = r.knobs.stale_gradient && !r.last_grad.empty();
    std::copy_n(stale ? r.last_grad.begin() : r.own_grad.begin(), np, r.grads.begin());
  }
}

// train.on_nonfinite: a NaN/Inf loss or local gradient on any rank. The decision to skip or stop is
// agreed by all ranks (one allreduce), so they skip or stop together; events name the ranks affected.
// Returns true when this step's update is to be skipped.
bool Run::handle_nonfinite(std::int64_t step) {
  const std::vector<double>& loss = now_.loss;
  const std::vector<double>& grad_norm = now_.grad_norm_local;
  int any = 0;
  nonfinite_seen_.resize(replicas_.size());
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    if (std::isfinite(loss[k]) && std::isfinite(grad_norm[k])) continue;
    any = 1;
    const bool log_it = cfg_.train.on_nonfinite != NonFinitePolicy::record || !nonfinite_seen_[k];
    nonfinite_seen_[k] = 1;
    if (log_it)
      log_(step, replicas_[k].rank, "nonfinite",
           "loss " + std::to_string(loss[k]) + ", local grad norm " + std::to_string(grad_norm[k]) +
               (cfg_.train.on_nonfinite == NonFinitePolicy::stop ? "; stopping" : cfg_.train.on_nonfinite == NonFinitePolicy::skip ? "; update skipped" : ""));
  }
  if (cfg_.train.on_nonfinite == NonFinitePolicy::record) return false;
  allreduce_in_place(&any, 1, MPI_INT, MPI_MAX, comm_);
  if (any && cfg_.train.on_nonfinite == NonFinitePolicy::stop) stop_requested_ = true;
  return any != 0;
}

// DDP's broadcast_buffers: rank 0's BatchNorm running statistics replace those of every rank they reach.
void Run::broadcast_buffers() {
  buffer_scratch_ = replicas_[0].buffers;  // logical rank 0's on process 0
  broadcast(buffer_scratch_.data(), static_cast<int>(buffer_scratch_.size()), MPI_FLOAT, 0, comm_);
  for (Replica& r : replicas_)
    if (r.knobs.receives_buffers) std::copy(buffer_scratch_.begin(), buffer_scratch_.end(), r.buffers.begin());
}

RunSummary Run::train(TrajectoryWriter& writer, Watchdog& watchdog) {
  log_ = [&writer](std::int64_t step, int rank, const std::string& kind, const std::string& detail) {
    writer.add_event(step, rank, kind, detail);
  };
  for (const auto& e : setup_events_) writer.add_event(e.step, e.rank, e.kind, e.detail);

  // Rank 0's initial parameters reach every rank whose init was not cut off by a fault.
  const std::int64_t first_step = resume_ ? resume_->next_step : 0;
  first_step_ = first_step;
  layer_rows_ = resume_ ? resume_->layer_rows : 0;
  eval_rows_ = resume_ ? resume_->eval_rows : 0;
  if (cfg_.dist.broadcast_init && !resume_) {
    std::vector<float> rank0 = replicas_[0].params;
    broadcast(rank0.data(), static_cast<int>(rank0.size()), MPI_FLOAT, 0, comm_);
    for (Replica& r : replicas_)
      if (r.receives_init) r.params = rank0;
  }
  if (cfg_.record.init_params && !resume_) write_initial_parameters(writer, model_, replicas_[0].params);
  const std::size_t L = model_.size(), R = replicas_.size(), np = model_.num_params();
  const auto parts = static_cast<std::size_t>(engine_->grad_parts());
  if (faults_->needs_last_gradient())
    for (Replica& r : replicas_) r.last_grad.assign(np, 0.0f);
  for (std::vector<double>* v : {&now_.loss, &now_.grad_norm_local, &now_.grad_norm, &now_.param_norm, &now_.lr,
                                 &now_.loss_scale, &now_.eval_loss, &now_.eval_acc})
    v->assign(R, 0.0);
  now_.param_hash.assign(R, 0);
  now_.samples.assign(R * static_cast<std::size_t>(plan_.per_rank_step()), 0);
  now_.loss_parts.assign(R * parts, 0.0);
  now_.local_overflow.assign(R, 0);
  now_.stats = LayerStatsBuffer{std::vector<double>(R * L * kStatCount), std::vector<double>(R * L * kStatCount),
                                std::vector<double>(R * L)};

  std::int64_t stopped_at = -1;
  Progress progress(proc_.process == 0 && !cfg_.quiet, total_steps_, first_step);
  const auto t0 = Clock::now();
  for (std::int64_t step = first_step; step < total_steps_; ++step) {
    watchdog.progress(step);
    begin_step(step);
    compute_gradients(step);
    local_gradients(step);
    reduce();
    update_parameters(step);
    record_step(writer, step);
    if (step + 1 == total_steps_ || (cfg_.train.eval_every > 0 && (step + 1) % cfg_.train.eval_every == 0))
      evaluate(writer, step);
    progress.update(step + 1, now_.global_loss);
    if (stop_or_checkpoint(writer, step)) {
      stopped_at = step;
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count() - eval_seconds_;
  if (stopped_at >= 0 && (cfg_.train.eval_every == 0 || (stopped_at + 1) % cfg_.train.eval_every != 0))
    evaluate(writer, stopped_at);
  watchdog.progress(total_steps_);  // the final flush and rename
  writer.finish();
  if (proc_.process == 0) {
    std::error_code ec;
    std::filesystem::remove_all(checkpoint_root(cfg_.output_path()), ec);  // the run is complete
  }
  if (stopped_at >= 0)
    throw NumericStop("non-finite loss or gradient at step " + std::to_string(stopped_at) +
                      " (train.on_nonfinite=stop); " + cfg_.output_path() + " holds steps 0.." + std::to_string(stopped_at));

  RunSummary s;
  s.steps = total_steps_;
  s.first_step = first_step;
  s.world_size = proc_.world_size;
  s.seconds = seconds;
  s.output = cfg_.output_path();
  const std::vector<double>& eval_loss = now_.eval_loss;
  const std::vector<double>& eval_acc = now_.eval_acc;
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

// The step's epoch and recording; each rank's knobs from the configuration, then the faults'.
void Run::begin_step(std::int64_t step) {
  now_.epoch = step / steps_per_epoch_;
  now_.in_epoch = step % steps_per_epoch_;
  if (step == first_step_ || now_.in_epoch == 0) sampler_->set_epoch(now_.epoch);
  now_.record_layers = cfg_.record.layers_every > 0 && step % cfg_.record.layers_every == 0;
  for (Replica& r : replicas_) {
    reset_knobs(r, step);
    faults_->adjust(step, r, log_);
    std::fill(r.loss_parts.begin(), r.loss_parts.end(), 0.0);
    r.loss_sum = 0.0;
    r.correct = 0;
    r.grads.begin_step(r.loss_scale);
  }
}

// Samples, the loss normalisation, and forward and backward of every micro-step into the gradients.
void Run::compute_gradients(std::int64_t step) {
  plan_samples(step, now_.epoch, now_.in_epoch);
  now_.targets = normalise_loss();
  for (int micro = 0; micro < plan_.accum_steps; ++micro) {
    micro_samples(micro);
    engine_->run_micro(replicas_, step, micro, norm_.backward_scale, now_.record_layers && micro == 0 ? &now_.stats : nullptr);
  }
  if (!now_.record_layers) return;
  // Gradients w.r.t. outputs as PyTorch sees them: per-rank mean loss, unscaled.
  const std::size_t block = model_.size() * kStatCount;
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    const double unscale = norm_.own_scale / replicas_[k].loss_scale;
    for (std::size_t i = k * block; i < (k + 1) * block; ++i) now_.stats.backward[i] *= unscale;
  }
}

// Each rank's own gradient as the allreduce receives it (a fixed-point sum's first part), which is where
// a fault corrupts it; its norms, losses and what faults keep of it; the global loss.
void Run::local_gradients(std::int64_t step) {
  const std::size_t np = model_.num_params(), parts = static_cast<std::size_t>(engine_->grad_parts());
  reduce_parts_ = reducer_->combine_local_parts(grad_spans_, static_cast<int>(parts));
  for (Replica& r : replicas_) {
    r.grads.advance(GradStage::computed, GradStage::local, "combine local parts");
    faults_->corrupt_gradients(step, r, np, log_);
  }
  local_gradient_norms(now_.grad_norm_local, now_.stats.grad_norm);
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    Replica& r = replicas_[k];
    now_.loss[k] = r.loss_sum / counted_[k];
    std::copy(r.loss_parts.begin(), r.loss_parts.end(), now_.loss_parts.begin() + static_cast<std::ptrdiff_t>(k * parts));
    if (!r.knobs.participates || r.knobs.extra_updates > 0 || r.knobs.local_overflow_check) own_gradient(r);
    now_.local_overflow[k] = r.knobs.local_overflow_check && overflows_fp16(r.own_grad);
  }
  now_.global_loss = 0.0;
  reducer_->sum_statistics(now_.loss_parts, static_cast<int>(parts), std::span<double>(&now_.global_loss, 1));
  now_.global_loss /= now_.targets;
}

// Non-finite checks, then per rank: unscale (or skip the step on an overflow), clip, the scheduled
// learning rate and the optimizer's update; then DDP's buffer broadcast.
void Run::update_parameters(std::int64_t step) {
  const bool skip_nonfinite = handle_nonfinite(step);
  const std::size_t np = model_.num_params();
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    Replica& r = replicas_[k];
    now_.loss_scale[k] = r.loss_scale;
    const std::span<float> g(r.grads.data(), np);
    bool skip = false;
    if (cfg_.precision.amp == AmpMode::fp16) {
      const ScalerUpdate u = scaler_.unscale_or_skip(
          g, r.loss_scale, r.good_steps, r.knobs.local_overflow_check ? std::optional<bool>(now_.local_overflow[k] != 0) : std::nullopt);
      skip = u.skipped;
      if (skip) log_(step, r.rank, "overflow_skip", "loss scale " + std::to_string(u.old_scale) + " -> " + std::to_string(r.loss_scale));
    }
    r.grads.unscaled(skip);
    // The norm before clipping is the applied one unless clipping scaled the gradient.
    const double before = clip_grad_norm(g, r.knobs.clip_norm);
    r.grads.advance(GradStage::unscaled, GradStage::clipped, "clip");
    now_.grad_norm[k] = r.knobs.clip_norm > 0.0 && before + 1e-6 > r.knobs.clip_norm ? l2_norm(g) : before;
    now_.lr[k] = scheduled_lr(cfg_.schedule, cfg_.optim.lr * lr_factor_, r.knobs.schedule_step, total_steps_);
    if (skip || skip_nonfinite || r.knobs.extra_updates < 0) continue;
    r.grads.applied();
    r.optimizer->step(r.params, g, now_.lr[k]);
    if (r.knobs.extra_updates > 0) {
      for (float& v : r.own_grad) v = static_cast<float>(v / r.loss_scale);
      r.optimizer->step(r.params, r.own_grad, now_.lr[k]);
    }
  }
  if (cfg_.dist.broadcast_buffers && model_.num_buffers() > 0) broadcast_buffers();
}

// The step's row of /train (and of /layers when due).
void Run::record_step(TrajectoryWriter& writer, std::int64_t step) {
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    now_.param_norm[k] = l2_norm(replicas_[k].params);
    now_.param_hash[k] = hash_bits(replicas_[k].params);
    std::copy(replicas_[k].step_samples.begin(), replicas_[k].step_samples.end(),
              now_.samples.begin() + static_cast<std::ptrdiff_t>(k * replicas_[k].step_samples.size()));
  }
  writer.append_train(TrainRow{step, now_.global_loss, now_.loss, now_.grad_norm_local, now_.grad_norm, now_.param_norm,
                               now_.lr, now_.loss_scale, now_.param_hash, now_.samples});
  if (now_.record_layers) {
    writer.append_layers(step, now_.stats.forward, now_.stats.backward, now_.stats.grad_norm);
    ++layer_rows_;
  }
}

// Every replica on the test split, recorded after `step`; its time is not counted in steps/s.
void Run::evaluate(TrajectoryWriter& writer, std::int64_t step) {
  const auto start = Clock::now();
  for (std::size_t k = 0; k < replicas_.size(); ++k) {
    const auto e = engine_->evaluate(replicas_[k], data_.test);
    now_.eval_loss[k] = e.loss;
    now_.eval_acc[k] = e.accuracy;
  }
  writer.append_eval(step, now_.eval_loss, now_.eval_acc);
  ++eval_rows_;
  eval_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
}

// A termination request (agreed by all processes, so they stop after the same step) checkpoints and
// ends the run with Preempted; so does nothing else. Periodic checkpoints. True when a non-finite value
// under train.on_nonfinite=stop ends the run after this step.
bool Run::stop_or_checkpoint(TrajectoryWriter& writer, std::int64_t step) {
  int terminate = termination_requested() ? 1 : 0;
  allreduce_in_place(&terminate, 1, MPI_INT, MPI_MAX, comm_);
  if (terminate && step + 1 < total_steps_) {
    checkpoint(writer, step);
    throw Preempted("terminated after step " + std::to_string(step) + "; checkpoint written to " +
                    checkpoint_root(cfg_.output_path()) + ", run again with run.resume=auto to continue");
  }
  if (cfg_.run.checkpoint_every > 0 && (step + 1) % cfg_.run.checkpoint_every == 0 && step + 1 < total_steps_)
    checkpoint(writer, step);
  return stop_requested_;
}

RunSummary run_training(const RunConfig& cfg, MPI_Comm comm) {
  check_configuration_skew(cfg, comm);
  // A clock-derived value agreed by all processes, for faults that make reruns differ on purpose.
  auto nonce = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  MPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, comm);
  // Set-up and the output file: failures are agreed collectively (clean exit, one message).
  std::unique_ptr<Run> run;
  // From here on a hung rank would hold the others in a collective: set-up's agreement, the file's
  // creation, the initial broadcast, the steps.
  int process = 0;
  MPI_Comm_rank(comm, &process);
  Watchdog watchdog(cfg.dist.timeout_s, process);
  const NodeShare share = node_share(comm);
  adapt_waiting(share);
  collectively(comm, [&] { run = std::make_unique<Run>(cfg, comm, nonce, share.processes); });
  if (process == 0 && !cfg.quiet) note_oversubscription(cfg, run->layout().world_size, run->layout().processes, share);
  watchdog.progress(-1);
  std::unique_ptr<TrajectoryWriter> writer;
  collectively(comm, [&] { writer = run->open_output(); });
  watchdog.progress(-1);
  return run->train(*writer, watchdog);
}

}  // namespace divsim
