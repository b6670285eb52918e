#pragma once
// RunConfig: the validated, typed configuration of one run.
//
// Built once at start-up by config/options.cpp from the embedded defaults, INI files and the command
// line (in that order, the command line wins), validated there, and then read-only: the step loop sees
// plain, already-checked numbers. Every member maps 1:1 to an INI key `section.key`; docs/configuration.md
// lists them. World-size dependent quantities (per-rank batch, accumulation) are derived in
// train/batch_plan.hpp once the world size is known, not stored here. Keys with a fixed set of values
// are enums (EnumNames gives each value its configuration text), so nothing past the parser compares
// strings.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numerics/bits.hpp"

namespace divsim {

enum class Device { cpu, cuda };
enum class ResumeMode { no, automatic };
enum class DataSource { fashion_mnist, synthetic, hdf5, fortunes, text };
enum class LossType { cross_entropy, asl };
enum class OptimizerType { sgd, adamw };
enum class ScheduleType { constant, step, cosine };
enum class LrScaling { none, linear };
enum class NonFinitePolicy { stop, skip, record };
enum class SamplerMode { distributed, global_batch };
enum class ReduceMode { mpi, ring, deterministic };
enum class CommBackend { mpi, nccl };
enum class AmpMode { none, fp16 };
enum class ReduceDtype { fp32, bf16, fp16 };
enum class DivideMode { after, before, sqrt };

// The configuration text of each value of a configuration enum, in the order --help lists them.
template <class E>
struct EnumNames;
#define DIVSIM_ENUM_NAMES(E, ...)                                                   \
  template <>                                                                       \
  struct EnumNames<E> {                                                             \
    static constexpr std::pair<E, std::string_view> values[] = {__VA_ARGS__};       \
  }
DIVSIM_ENUM_NAMES(Device, {Device::cpu, "cpu"}, {Device::cuda, "cuda"});
DIVSIM_ENUM_NAMES(ResumeMode, {ResumeMode::no, "no"}, {ResumeMode::automatic, "auto"});
DIVSIM_ENUM_NAMES(DataSource, {DataSource::fashion_mnist, "fashion-mnist"}, {DataSource::synthetic, "synthetic"},
                  {DataSource::hdf5, "hdf5"}, {DataSource::fortunes, "fortunes"}, {DataSource::text, "text"});
DIVSIM_ENUM_NAMES(LossType, {LossType::cross_entropy, "cross_entropy"}, {LossType::asl, "asl"});
DIVSIM_ENUM_NAMES(OptimizerType, {OptimizerType::sgd, "sgd"}, {OptimizerType::adamw, "adamw"});
DIVSIM_ENUM_NAMES(ScheduleType, {ScheduleType::constant, "constant"}, {ScheduleType::step, "step"},
                  {ScheduleType::cosine, "cosine"});
DIVSIM_ENUM_NAMES(LrScaling, {LrScaling::none, "none"}, {LrScaling::linear, "linear"});
DIVSIM_ENUM_NAMES(NonFinitePolicy, {NonFinitePolicy::stop, "stop"}, {NonFinitePolicy::skip, "skip"},
                  {NonFinitePolicy::record, "record"});
DIVSIM_ENUM_NAMES(SamplerMode, {SamplerMode::distributed, "distributed"}, {SamplerMode::global_batch, "global_batch"});
DIVSIM_ENUM_NAMES(ReduceMode, {ReduceMode::mpi, "mpi"}, {ReduceMode::ring, "ring"},
                  {ReduceMode::deterministic, "deterministic"});
DIVSIM_ENUM_NAMES(CommBackend, {CommBackend::mpi, "mpi"}, {CommBackend::nccl, "nccl"});
DIVSIM_ENUM_NAMES(AmpMode, {AmpMode::none, "none"}, {AmpMode::fp16, "fp16"});
DIVSIM_ENUM_NAMES(ReduceDtype, {ReduceDtype::fp32, "fp32"}, {ReduceDtype::bf16, "bf16"}, {ReduceDtype::fp16, "fp16"});
DIVSIM_ENUM_NAMES(DivideMode, {DivideMode::after, "after"}, {DivideMode::before, "before"}, {DivideMode::sqrt, "sqrt"});
DIVSIM_ENUM_NAMES(MatmulFormat, {MatmulFormat::fp32, "fp32"}, {MatmulFormat::tf32, "tf32"},
                  {MatmulFormat::bf16, "bf16"}, {MatmulFormat::fp16, "fp16"});
#undef DIVSIM_ENUM_NAMES

template <class E>
constexpr std::string_view name_of(E e) {
  for (const auto& [value, name] : EnumNames<E>::values)
    if (value == e) return name;
  return "?";
}

template <class E>
constexpr std::optional<E> enum_from(std::string_view name) {
  for (const auto& [value, text] : EnumNames<E>::values)
    if (text == name) return value;
  return std::nullopt;
}

struct RunSection {
  std::string name = "default";   // run name; default output is outputs/<name>.h5
  std::string out;                // output path; empty -> outputs/<name>.h5
  bool overwrite = false;         // replace an existing output file
  std::uint64_t seed = 0;         // base key of every random stream
  Device device = Device::cpu;    // cpu | cuda (needs a build with -DDIVSIM_CUDA=ON)
  std::int64_t checkpoint_every = 0;  // checkpoint every N steps (0: only on SIGTERM)
  ResumeMode resume = ResumeMode::no;  // no | auto: continue from the newest checkpoint of run.out, if any
};

struct DataSection {
  DataSource source = DataSource::fashion_mnist;  // fashion-mnist | synthetic | hdf5 | fortunes | text
  std::string root = "/usr/share/datasets/fashion-mnist";
  std::string path;             // hdf5: the data file (data/h5_dataset.hpp); text: the UTF-8 text file
  std::int64_t train_size = 0;  // 0 = the whole training split; else its first N samples
  std::int64_t test_size = 0;   // 0 = the whole test split
  bool augment = false;         // random horizontal flip + shift by up to 2 pixels (images only)
  // synthetic teacher-network data
  std::int64_t synthetic_train = 8192;
  std::int64_t synthetic_test = 2048;
  std::int64_t synthetic_features = 64;
  std::int64_t synthetic_classes = 10;
  std::int64_t synthetic_teacher_hidden = 32;
};

struct ModelSection {
  std::string type = "mlp";                        // a registered model (model/models/)
  std::vector<std::int64_t> hidden = {256, 128};  // mlp: hidden widths, e.g. "256,128"
  bool batchnorm = false;
  double dropout = 0.0;      // drop probability after each hidden ReLU (vit, gpt: after the attention and MLP projections)
  double bn_momentum = 0.1;  // PyTorch convention: running = (1-m)*running + m*batch
  double bn_eps = 1e-5;
  std::vector<std::int64_t> channels = {16, 32, 64};  // resnet: channels of each stage
  std::int64_t blocks = 1;                            // resnet: basic blocks per stage
  std::int64_t patch = 7;                             // vit: patch side (28 / 7 = 4x4 = 16 tokens)
  std::int64_t dim = 64;                              // vit, gpt: token width
  std::int64_t heads = 4;                             // vit, gpt: attention heads (dim % heads == 0)
  std::int64_t depth = 4;                             // vit, gpt: transformer blocks
  std::int64_t mlp_ratio = 4;                         // vit, gpt: hidden width of a block's MLP / dim
  std::int64_t block_size = 64;                       // gpt: tokens per sequence (context length)
};

struct LossSection {
  LossType type = LossType::cross_entropy;  // cross_entropy | asl
  double label_smoothing = 0.0;
  double gamma_pos = 0.0;  // asl: focusing exponent of the positive class
  double gamma_neg = 4.0;  // asl: focusing exponent of the negative classes
  double margin = 0.05;    // asl: probability margin shifted off the negatives
};

struct OptimSection {
  OptimizerType type = OptimizerType::sgd;  // sgd | adamw
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double clip_norm = 0.0;  // 0 = no clipping; else clip the global gradient L2 norm to this
};

struct ScheduleSection {
  ScheduleType type = ScheduleType::cosine;  // constant | step | cosine
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1000;  // step schedule: decay every step_size steps
  double gamma = 0.1;             // step schedule: decay factor
  double min_lr = 0.0;            // cosine: floor
};

struct BatchSection {
  std::int64_t global = 256;    // global batch per optimizer step (all ranks, all micro-steps)
  std::int64_t per_rank = 0;    // if > 0: per-rank micro-batch fixed instead (global grows with W)
  std::int64_t accum_steps = 1; // micro-batches per optimizer step (the least, with max_micro)
  std::int64_t max_micro = 0;   // if > 0: largest per-rank micro-batch; accumulation grows with 1/W to fit
  bool drop_last = true;        // sampler: drop the tail instead of padding by wrap-around
  LrScaling lr_scaling = LrScaling::none;  // none | linear: lr *= global / base_global (Goyal et al.)
  std::int64_t base_global = 256;    // the global batch optim.lr was tuned for
};

struct TrainSection {
  std::int64_t steps = 0;       // optimizer steps; 0 -> derived from epochs
  std::int64_t epochs = 10;
  std::int64_t eval_every = 0;  // 0 = evaluate only at the end
  NonFinitePolicy on_nonfinite = NonFinitePolicy::record;  // stop | skip | record: what a NaN/Inf loss or gradient does
};

struct SamplerSection {
  SamplerMode mode = SamplerMode::distributed;  // distributed | global_batch
  bool shuffle = true;
  std::uint64_t seed = 0;  // PyTorch DistributedSampler's seed (shuffled with seed + epoch)
};

struct DistSection {
  ReduceMode reduce = ReduceMode::mpi;  // mpi | ring | deterministic
  CommBackend backend = CommBackend::mpi;  // mpi | nccl (GPU builds): who moves the gradient bytes
  double bucket_cap_mb = 25.0;
  bool broadcast_buffers = true;
  bool sync_bn = false;
  bool broadcast_init = true;
  std::int64_t world_size = 0;  // logical ranks W; 0 = one per MPI process; else a multiple of the process count
  std::int64_t det_chunk = 0;   // deterministic mode: samples per chunk; 0 = auto (see docs/reproducibility.md)
  double timeout_s = 600.0;     // a step-loop collective waiting longer ends the job (a hung rank); 0 = never
  bool shared_memory = true;    // deterministic tree: one node's processes read each other's gradients in place
  ReduceDtype reduce_dtype = ReduceDtype::fp32;  // what the gradient is sent and summed in (comm/reduce_arithmetic.hpp)
  DivideMode divide = DivideMode::after;         // where the division by the world size happens
};

struct PrecisionSection {
  MatmulFormat matmul = MatmulFormat::fp32;  // fp32 | tf32 | bf16 | fp16 (emulated: matmul inputs rounded)
  AmpMode amp = AmpMode::none;  // none | fp16: dynamic loss scaling as torch.cuda.amp.GradScaler
  double loss_scale_init = 65536.0;
  std::int64_t loss_scale_growth_interval = 2000;  // good steps before the scale doubles
};

struct RecordSection {
  std::int64_t layers_every = 10;  // per-layer statistics every N steps (0 = never)
  bool samples = false;            // record /train/samples
  bool init_params = false;        // record rank 0's initial parameters under /init/<layer>/<param> (replays)
  std::int64_t flush_every = 100;  // H5Fflush every N steps
  std::int64_t chunk_steps = 256;  // HDF5 chunk length along the step axis
};

struct RunConfig {
  RunSection run;
  DataSection data;
  ModelSection model;
  LossSection loss;
  OptimSection optim;
  ScheduleSection schedule;
  BatchSection batch;
  TrainSection train;
  SamplerSection sampler;
  DistSection dist;
  PrecisionSection precision;
  RecordSection record;
  std::vector<std::string> faults;  // repeatable `fault = NAME[:k=v,...]` specs, as given
  bool quiet = false;               // no progress line (command line only, not part of the run's identity)

  // Effective output path: run.out, or outputs/<run.name>.h5.
  std::string output_path() const { return run.out.empty() ? "outputs/" + run.name + ".h5" : run.out; }
};

}  // namespace divsim
