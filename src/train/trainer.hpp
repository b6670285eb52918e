#pragma once
// The run: set-up (data, model, replicas, sampler, reducer, output file) and the optimizer-step loop
// (micro-batches, accumulation, sync, clip, optimizer, buffer sync, record, eval).
//
// Set-up validates everything that depends on the world size *before* the output file is created, so
// a bad configuration leaves nothing behind. The loop knows no fault by name.
#include <mpi.h>

#include <cstdint>
#include <string>

#include "config/run_config.hpp"
#include "train/run_edge.hpp"  // the exceptions and exit codes run_training ends with

namespace divsim {

struct RunSummary {
  std::int64_t steps = 0;       // of the whole run
  std::int64_t first_step = 0;  // where this start began (> 0 after a resume)
  int world_size = 1;
  double seconds = 0.0;          // wall time of this start's steps (evaluations excluded)
  double eval_loss_min = 0, eval_loss_max = 0, eval_acc_min = 0, eval_acc_max = 0;  // final eval over ranks
  std::string output;
};

RunSummary run_training(const RunConfig& cfg, MPI_Comm comm);

}  // namespace divsim
