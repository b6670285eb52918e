#pragma once
// The program's edge around a run: the exceptions a run ends with and their exit codes, set-up steps
// that all processes agree on, and the checks made before anything else (configuration skew between
// processes, oversubscribed nodes).
#include <mpi.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "comm/collectives.hpp"  // NodeShare
#include "config/run_config.hpp"

namespace divsim {

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

// Runs `fn` on every process; if it threw anywhere, every process throws SetupFailure (collectively
// agreed, so no process is left waiting in a later collective).
template <class Fn>
void collectively(MPI_Comm comm, Fn&& fn);

// Every process must run the same configuration and binary (seed 002 §3.5/§5.2: "some cards had the new
// code"). Collective; throws SetupFailure (exit 2) listing the differing keys per rank.
void check_configuration_skew(const RunConfig& cfg, MPI_Comm comm);

// More processes than CPUs on a node: a note on stderr with the faster layout (process 0 calls it).
void note_oversubscription(const RunConfig& cfg, int world, int processes, const NodeShare& share);

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

}  // namespace divsim
