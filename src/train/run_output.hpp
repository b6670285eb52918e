#pragma once
// The run's output file. A fresh run creates it; a resumed run creates it anew and first replays into it
// the interrupted run's rows up to the checkpoint it continues from, so the finished file is one
// trajectory either way. Also what a checkpoint must match (config_identity) and /init.
#include <mpi.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "record/trajectory_writer.hpp"
#include "train/checkpoint.hpp"

namespace divsim {

// What the output is made of, from the run's set-up.
struct OutputPlan {
  const RunConfig& cfg;
  MPI_Comm comm;
  int process = 0;
  TrajectoryLayout layout;
  const Model& model;
  const DataSplits& data;
  std::vector<FaultRow> faults;
  const CheckpointManifest* resume = nullptr;  // the checkpoint a resumed run continues from; null: fresh
};

// Collective: the open writer of `plan.cfg.output_path()`'s .partial, holding the replayed rows on resume.
std::unique_ptr<TrajectoryWriter> open_output(const OutputPlan& plan);

// Collective: /init, rank 0's initial parameters (`params`: the whole flat vector), one dataset per tensor.
void write_initial_parameters(TrajectoryWriter& writer, const Model& model, std::span<const float> params);

// The configuration a checkpoint must match: the effective INI without run.resume.
std::string config_identity(const RunConfig& cfg);

}  // namespace divsim
