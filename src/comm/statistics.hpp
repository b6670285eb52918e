#pragma once
// Statistics (BatchNorm sums, losses) for the reducers whose order does not matter to the experiment:
// local rows summed in order, then MPI_Allreduce(SUM) in double.
#include <mpi.h>

#include <span>

namespace divsim {

void sum_statistics_allreduce(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm);

}  // namespace divsim
