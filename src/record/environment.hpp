#pragma once
// The "environment probe" the field reports ask for before comparing two runs (seed 000, seed 002 §5.2):
// which binary, libraries and hosts produced a file. Collective: every process returns identical values.
#include <mpi.h>

#include "record/trajectory_writer.hpp"

namespace divsim {

// divsim_version, git_sha and env (MPI, HDF5, Eigen, Boost, compiler, hosts); config/created are left
// for the caller.
RootAttributes environment_attributes(MPI_Comm comm);

}  // namespace divsim
