#pragma once
// The run: set-up (data, model, replicas, sampler, reducer, output file) and the optimizer-step loop
// (micro-batches, accumulation, sync, clip, optimizer, buffer sync, record, eval).
//
// Set-up validates everything that depends on the world size *before* the output file is created, so
// a bad configuration leaves nothing behind. The loop knows no fault by name.
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

#include "config/run_config.hpp"

namespace divsim {

struct RunSummary {
  std::int64_t steps = 0;       // of the whole run
  std::int64_t first_step = 0;  // where this start began (> 0 after a resume)
  int world_size = 1;
  double seconds = 0.0;          // wall time of this start's steps (evaluations excluded)
  double eval_loss_min = 0, eval_loss_max = 0, eval_acc_min = 0, eval_acc_max = 0;  // final eval over ranks
  std::string output;
};

// Thrown on every process when set-up failed on any of them, after they agreed on it collectively, so
// the job ends without MPI_Abort and the message is printed once: `report` is true on exactly one
// process (the lowest failing one), whose what() is the original message.
class SetupFailure : public std::runtime_error {
 public:
  SetupFailure(const std::string& message, int exit_code, bool report)
      : std::runtime_error(message), exit_code_(exit_code), report_(report) {}
  int exit_code() const { return exit_code_; }
  bool report() const { return report_; }

 private:
  int exit_code_;
  bool report_;
};

// train.on_nonfinite=stop ended the run (after the file was completed): exit code 4.
class NumericStop : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SIGTERM arrived: the run checkpointed and stopped (exit code kExitPreempted, train/termination.hpp).
class Preempted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit code for an exception at the program's edge: 2 bad input, 3 runtime I/O, 1 otherwise.
int exit_code_for(const std::exception_ptr& e);

// Every process must run the same configuration and binary (seed 002 §3.5/§5.2: "some cards had the new
// code"). Collective; throws SetupFailure (exit 2) listing the differing keys per rank.
void check_configuration_skew(const RunConfig& cfg, MPI_Comm comm);

RunSummary run_training(const RunConfig& cfg, MPI_Comm comm);

}  // namespace divsim
