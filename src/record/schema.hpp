#pragma once
// The HDF5 trajectory schema (version 1) as one table: every dataset and attribute a trajectory file can
// hold, with its type, axes, meaning and when it is written. TrajectoryWriter creates the datasets and
// their `dims` and `description` attributes from it, read_recorded_run() finds the datasets by it, and
// docs/hdf5-schema.md's tables are printed from it (tools/gen-schema-doc.sh; CTest docs.hdf5_schema
// checks the doc is current). It says what the file holds, not how it is written: no HDF5 here.
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace divsim::schema {

inline constexpr std::int64_t kVersion = 1;  // root attribute schema_version

// Types as the doc names them; the numeric ones are little-endian in the file.
enum class Type { int64, uint64, float64, float32, string, strings, compound };
std::string_view type_name(Type t);

// Every dataset, in the order of the doc's table.
enum class DatasetId {
  train_step, train_loss, train_global_loss, train_grad_norm_local, train_grad_norm, train_param_norm,
  train_param_hash, train_lr, train_loss_scale, train_samples,
  layers_names, layers_step, layers_forward, layers_backward, layers_grad_norm,
  eval_step, eval_loss, eval_accuracy,
  events, faults, schedule_lr, init,
};

struct DatasetSchema {
  DatasetId id;
  std::string_view path;  // absolute; a `<name>` part stands for any name (/init/<layer>/<param>)
  Type type;
  std::string_view dims;         // the `dims` attribute: axis names, comma-separated; empty: per dataset
  std::string_view shape;        // in the doc's axis sizes (S, W, L, ...)
  std::string_view written;      // when a file holds it
  std::string_view description;  // the `description` attribute (/init: per dataset, this documents them)

  std::vector<std::string_view> axes() const;  // dims split at the commas
  // Axis 1 is the rank axis: each process writes, and reads back, the slice of its own logical ranks.
  bool per_rank() const;
};

// Every attribute: of the root group (on "/") and of datasets.
enum class AttributeId {
  schema_version, world_size, divsim_version, git_sha, created, config, env, model, vocabulary, data,
  slurm_job_id, slurm_array_job_id, slurm_array_task_id, slurm_nodes, slurm_job_name, recovered,
  dims, description, stats,
};

struct AttributeSchema {
  AttributeId id;
  std::string_view name;
  Type type;
  std::string_view on;       // "/" for a root attribute, else the datasets that carry it
  std::string_view written;  // when a file holds it
  std::string_view description;

  bool root() const { return on == "/"; }
};

std::span<const DatasetSchema> datasets();
std::span<const AttributeSchema> attributes();
const DatasetSchema& dataset(DatasetId id);
const AttributeSchema& attribute(AttributeId id);
// The entry that declares a concrete path (/init/fc1/weight: the /init/<layer>/<param> entry). Throws
// std::logic_error when the schema declares none: divsim writes nothing the table does not describe.
const DatasetSchema& dataset(std::string_view path);
// The root attribute called `name`; std::logic_error when the schema declares none.
const AttributeSchema& root_attribute(std::string_view name);

// /train's per-rank float64 columns that TrainRow and RecordedRun carry as one array, in their order.
inline constexpr std::array<DatasetId, 6> kTrainColumns{DatasetId::train_loss,       DatasetId::train_grad_norm_local,
                                                        DatasetId::train_grad_norm,  DatasetId::train_param_norm,
                                                        DatasetId::train_lr,         DatasetId::train_loss_scale};

}  // namespace divsim::schema
