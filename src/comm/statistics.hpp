#pragma once
// Statistics (BatchNorm sums, losses) for the reducers whose order does not matter to the experiment:
// local rows summed in order, then MPI_Allreduce(SUM) in double.
#include <mpi.h>

#include <span>
#include <vector>

namespace divsim {

void sum_statistics_allreduce(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm);

// The same sum in a fixed order: every row of every process is gathered and added in logical-rank order,
// so the result does not depend on how logical ranks are spread over processes (statistics are small).
void sum_statistics_in_rank_order(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm,
                                  std::vector<double>& scratch);

}  // namespace divsim
