#pragma once
// Ending the whole job from one failing process without losing its message.
#include <mpi.h>

#include <string_view>

namespace divsim {

// Waits, at most about a second, until whoever reads this process's stderr (mpiexec's proxy, Slurm's
// step daemon) has taken everything written to it. Returns at once when stderr is a file or a terminal.
void wait_for_stderr_reader();

// Prints "divsim: error on rank R: <message>" (R in MPI_COMM_WORLD), waits for the launcher to read it,
// then MPI_Abort(comm, exit_code). Hydra's proxy handles the abort and the stderr pipe in one event loop
// and can kill the job before it has read a message written just before MPI_Abort: measured here, 8 of
// 300 two-rank jobs ended with an empty stderr without the wait, none of 300 with it.
[[noreturn]] void abort_job(MPI_Comm comm, int exit_code, std::string_view message);

}  // namespace divsim
