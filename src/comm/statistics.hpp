#pragma once
// Statistics (BatchNorm sums, losses): rows [rows][n] of this process summed with every process's.
#include <mpi.h>

#include <cstdint>
#include <span>
#include <vector>

namespace divsim {

void sum_statistics_allreduce(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm);

// The same sum in a fixed order: every row of every process is gathered and added in logical-rank order,
// so the result does not depend on how logical ranks are spread over processes (statistics are small).
void sum_statistics_in_rank_order(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm,
                                  std::vector<double>& scratch);

// deterministic: the exact sum in 64-bit fixed point, one scale per element from the global maximum
// magnitude (comm/deterministic_reducer.cpp), so that no order matters; NaN/Inf make the element NaN.
struct FixedPointScratch {
  std::vector<double> max;
  std::vector<std::int64_t> fixed;
};
void sum_statistics_fixed_point(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm,
                                FixedPointScratch& scratch);

}  // namespace divsim
