#pragma once
// dist.backend=nccl: the gradient allreduce through NCCL on this process's GPU (kernels/nccl_reducer.cpp).
// Plain C++ header: no CUDA or NCCL types.
#include <mpi.h>

#include <memory>

#include "comm/reducer.hpp"

namespace divsim {

// Collective over comm: selects this process's GPU (as make_gpu_engine does), checks that no two
// processes of a node share one (NCCL refuses that), and builds one NCCL communicator over comm's
// processes, bootstrapped over MPI. Throws ConfigError on every process when a check fails.
std::unique_ptr<Reducer> make_nccl_reducer(MPI_Comm comm, const ReduceLayout& layout);

}  // namespace divsim
