// The schema table (see the header). Descriptions are single lines of text with Markdown code spans: they
// are both the files' `description` attributes and the cells of docs/hdf5-schema.md's tables.
#include "record/schema.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace divsim::schema {

namespace {

using enum Type;

constexpr std::string_view kAlways = "always";
constexpr std::string_view kEveryDataset = "every dataset";
constexpr std::string_view kInSlurm = "in a Slurm job";
constexpr std::string_view kInSlurmArray = "in a Slurm job array";

constexpr DatasetSchema kDatasets[] = {
    {DatasetId::train_step, "/train/step", int64, "step", "[S]", kAlways, "optimizer step of each row"},
    {DatasetId::train_loss, "/train/loss", float64, "step,rank", "[S,W]", kAlways,
     "rank's local loss: mean over the samples it processed in the step (the forward pass of step t), before "
     "reduction; for a sequence model (`gpt`) the mean over its unpadded targets"},
    {DatasetId::train_global_loss, "/train/global_loss", float64, "step", "[S]", kAlways,
     "mean loss over the whole global batch of the step (sequence models: over all its unpadded targets, the loss "
     "the gradient is of)"},
    {DatasetId::train_grad_norm_local, "/train/grad_norm_local", float64, "step,rank", "[S,W]", kAlways,
     "L2 norm of the rank's own mean gradient of the step, before reduction (unscaled)"},
    {DatasetId::train_grad_norm, "/train/grad_norm", float64, "step,rank", "[S,W]", kAlways,
     "L2 norm of the gradient the rank's optimizer applied in the step (after reduction, unscaling and clipping)"},
    {DatasetId::train_param_norm, "/train/param_norm", float64, "step,rank", "[S,W]", kAlways,
     "L2 norm of all parameters of the rank's replica after step t's update"},
    {DatasetId::train_param_hash, "/train/param_hash", uint64, "step,rank", "[S,W]", kAlways,
     "64-bit hash of the bits of all parameters of the rank's replica after step t's update: replicas in sync <=> "
     "equal (`numerics/bits.hpp`; compare hashes between files written by the same divsim version)"},
    {DatasetId::train_lr, "/train/lr", float64, "step,rank", "[S,W]", kAlways,
     "learning rate the rank's optimizer used in the step"},
    {DatasetId::train_loss_scale, "/train/loss_scale", float64, "step,rank", "[S,W]", kAlways,
     "loss scale the rank used in the step (1 without `precision.amp`)"},
    {DatasetId::train_samples, "/train/samples", int64, "step,rank,sample", "[S,W,B]", "`record.samples=true`",
     "global dataset indices of the samples the rank consumed in the step, micro-batches in order"},
    {DatasetId::layers_names, "/layers/names", string, "layer", "[L]", kAlways,
     "recorded layer names in the order they run, the order of the layer axis (the mlp's `fc1`, `bn1`, `relu1`, "
     "`drop1`, ..., `fcN`; the resnet's `conv1`, `bn1`, `relu`, `layer1.0.conv1`, ...)"},
    {DatasetId::layers_step, "/layers/step", int64, "step", "[S']", kAlways,
     "optimizer steps at which layer statistics were taken (every `record.layers_every`; none when it is 0)"},
    {DatasetId::layers_forward, "/layers/forward", float64, "step,rank,layer,stat", "[S',W,L,5]", kAlways,
     "mean, std, min, max, L2 of each layer's output over the rank's first micro-batch of the step (the `stats` "
     "attribute names them)"},
    {DatasetId::layers_backward, "/layers/backward", float64, "step,rank,layer,stat", "[S',W,L,5]", kAlways,
     "the same statistics of the loss gradient w.r.t. each layer's output over the rank's first micro-batch of the "
     "step"},
    {DatasetId::layers_grad_norm, "/layers/grad_norm", float64, "step,rank,layer", "[S',W,L]", kAlways,
     "L2 norm of the rank's own gradient (before reduction) of each layer's parameters; 0 for layers without "
     "parameters"},
    {DatasetId::eval_step, "/eval/step", int64, "step", "[E]", kAlways,
     "optimizer step after which the evaluation ran (every `train.eval_every` and at the end)"},
    {DatasetId::eval_loss, "/eval/loss", float64, "step,rank", "[E,W]", kAlways,
     "mean loss of the rank's own replica on the test set (running BN statistics, no dropout; plain cross-entropy); "
     "sequence models: nats per token over the held-out split's unpadded targets"},
    {DatasetId::eval_accuracy, "/eval/accuracy", float64, "step,rank", "[E,W]", kAlways,
     "top-1 accuracy (fraction) of the rank's own replica on the test set; sequence models: next-token accuracy "
     "over the held-out split's unpadded targets"},
    {DatasetId::events, "/events", compound, "event", "table", kAlways,
     "event log, sorted by (step, rank) within each flush: step (int64), rank (int32; -1: all ranks), kind (string "
     "32), detail (string 224); kinds: fault activations (kind = the fault's name), `overflow_skip`, `nonfinite`"},
    {DatasetId::faults, "/faults", compound, "fault", "table", kAlways,
     "the injected faults as configured: name, ranks, spec (as given), start, stop (-1 = end), every, prob"},
    {DatasetId::schedule_lr, "/schedule/lr", float64, "step", "[T]", kAlways,
     "the learning rate the configured schedule gives each optimizer step 0..T-1 of the run (`optim/schedule.hpp`, "
     "after `batch.lr_scaling`), computed by the code the optimizers use; `/train/lr` is what each rank used"},
    {DatasetId::init, "/init/<layer>/<param>", float32, "", "PyTorch shape", "`record.init_params=true`",
     "rank 0's initial parameters, before step 0, for replays; `<layer>.<param>` is the PyTorch state_dict key "
     "split at its last dot (`/init/layer1.0.conv1/weight`, `/init/transformer.wte/weight`); `dims` is `out,in` "
     "(linear), `out,in,kh,kw` (conv2d), `feature` (1-d)"},
};

constexpr AttributeSchema kAttributes[] = {
    {AttributeId::schema_version, "schema_version", int64, "/", kAlways,
     "version of this schema, 1; `analysis/` refuses files of another"},
    {AttributeId::world_size, "world_size", int64, "/", kAlways, "W, the number of logical ranks"},
    {AttributeId::divsim_version, "divsim_version", string, "/", kAlways,
     "version of the divsim binary that wrote the file"},
    {AttributeId::git_sha, "git_sha", string, "/", kAlways,
     "the 12-digit commit the binary was built from, read at build time, with `-dirty` when tracked files differed "
     "from it"},
    {AttributeId::created, "created", string, "/", kAlways,
     "when the run started: ISO 8601 UTC, process 0's clock (a resumed or recovered run keeps its first start's)"},
    {AttributeId::config, "config", string, "/", kAlways,
     "the effective configuration as INI: `divsim --config` on it reproduces the run"},
    {AttributeId::env, "env", string, "/", kAlways,
     "environment probe: MPI library and process count, the node's processes and CPUs and how collectives wait "
     "(`node=`), HDF5, Eigen (and SIMD), the GEMM backend (`gemm=`: `Eigen`, or OpenBLAS's configuration and the "
     "kernel it picked for the CPU, or `Eigen (not OpenBLAS ...: no AVX-512 kernels)` where Eigen's AVX-512 kernels "
     "replace OpenBLAS's narrower ones), Boost, compiler, CUDA, hosts"},
    {AttributeId::model, "model", string, "/", kAlways,
     "the network as JSON: `type`, `input` (one sample's shape, e.g. `[1, 28, 28]`), `classes`, and `layers` in the "
     "order they run, each with `name` (its parameters' scope: `layer1.0.conv1`), `style` (docs/models.md), `inputs` "
     "and `output` (activation numbers; 0 is the input batch), `options` (the style's settings), `output_shape`, "
     "`params` and `buffers` (tensor names), `tied` (a parameter that is an earlier layer's tensor, by state_dict "
     "key: the GPT's `lm_head` `{\"weight\": \"transformer.wte.weight\"}`), `products` (the matrix products with a "
     "weight that the layer runs per sample, `[rows, in, out]`: y (rows, out) = x (rows, in) w^T, e.g. a 3x3 "
     "conv2d's `[784, 144, 16]`; attention's activation-by-activation products are not listed). "
     "`validation/torch_graph.py` builds the same network in PyTorch from it"},
    {AttributeId::vocabulary, "vocabulary", string, "/", "text data only (`data.source=fortunes` or `text`)",
     "the JSON list of each token id's text (`\"<|doc|>\"`, the characters, `\"<|unk|>\"`), to decode "
     "`/train/samples`' sequences"},
    {AttributeId::data, "data", string, "/", kAlways,
     "dataset description, e.g. `fashion-mnist 60000/10000 (784 features, 10 classes)`"},
    {AttributeId::slurm_job_id, "slurm_job_id", string, "/", kInSlurm, "the job's id (`SLURM_JOB_ID`)"},
    {AttributeId::slurm_array_job_id, "slurm_array_job_id", string, "/", kInSlurmArray,
     "the array's job id (`SLURM_ARRAY_JOB_ID`)"},
    {AttributeId::slurm_array_task_id, "slurm_array_task_id", string, "/", kInSlurmArray,
     "the element's index in the array (`SLURM_ARRAY_TASK_ID`)"},
    {AttributeId::slurm_nodes, "slurm_nodes", string, "/", kInSlurm, "the job's nodes (`SLURM_JOB_NODELIST`)"},
    {AttributeId::slurm_job_name, "slurm_job_name", string, "/", kInSlurm, "the job's name (`SLURM_JOB_NAME`)"},
    {AttributeId::recovered, "recovered", string, "/", "in a file rebuilt by `divsim recover`",
     "from which journal the file was rebuilt, how many steps in how many complete flushes, and why reading the "
     "journal stopped"},
    {AttributeId::dims, "dims", string, kEveryDataset, kAlways,
     "the dataset's axis names, comma-separated, outermost first (e.g. `step,rank`)"},
    {AttributeId::description, "description", string, kEveryDataset, kAlways,
     "what the dataset holds, in words (the meaning column of the datasets table)"},
    {AttributeId::stats, "stats", strings, "`/layers/forward`, `/layers/backward`", kAlways,
     "the names of the `stat` axis in its order: mean, std, min, max, l2"},
};

// Lookups by id index the tables: their order must be the enums'.
template <class Table>
constexpr bool in_id_order(const Table& table) {
  for (std::size_t i = 0; i < std::size(table); ++i)
    if (static_cast<std::size_t>(table[i].id) != i) return false;
  return true;
}
static_assert(in_id_order(kDatasets) && std::size(kDatasets) == static_cast<std::size_t>(DatasetId::init) + 1);
static_assert(in_id_order(kAttributes) && std::size(kAttributes) == static_cast<std::size_t>(AttributeId::stats) + 1);

// Whether a concrete path is the entry's: equal, or under a pattern's part before its first `<name>`.
bool declares(const DatasetSchema& d, std::string_view path) {
  const std::size_t pattern = d.path.find('<');
  if (pattern == std::string_view::npos) return path == d.path;
  return path.size() > pattern && path.starts_with(d.path.substr(0, pattern));
}

}  // namespace

std::string_view type_name(Type t) {
  switch (t) {
    case int64: return "int64";
    case uint64: return "uint64";
    case float64: return "float64";
    case float32: return "float32";
    case string: return "string";
    case strings: return "string list";
    case compound: return "compound";
  }
  throw std::logic_error("schema::type_name: unknown type");
}

std::vector<std::string_view> DatasetSchema::axes() const {
  std::vector<std::string_view> out;
  for (std::string_view rest = dims; !rest.empty();) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    out.push_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return out;
}

bool DatasetSchema::per_rank() const {
  const auto a = axes();
  return a.size() > 1 && a[1] == "rank";
}

std::span<const DatasetSchema> datasets() { return kDatasets; }
std::span<const AttributeSchema> attributes() { return kAttributes; }
const DatasetSchema& dataset(DatasetId id) { return kDatasets[static_cast<std::size_t>(id)]; }
const AttributeSchema& attribute(AttributeId id) { return kAttributes[static_cast<std::size_t>(id)]; }

const DatasetSchema& dataset(std::string_view path) {
  const auto it = std::ranges::find_if(kDatasets, [path](const DatasetSchema& d) { return declares(d, path); });
  if (it == std::end(kDatasets))
    throw std::logic_error("HDF5 schema: no dataset '" + std::string(path) + "' in record/schema.cpp");
  return *it;
}

const AttributeSchema& root_attribute(std::string_view name) {
  const auto it =
      std::ranges::find_if(kAttributes, [name](const AttributeSchema& a) { return a.root() && a.name == name; });
  if (it == std::end(kAttributes))
    throw std::logic_error("HDF5 schema: no root attribute '" + std::string(name) + "' in record/schema.cpp");
  return *it;
}

}  // namespace divsim::schema
