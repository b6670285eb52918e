// dist.reduce=mpi: what a user gets from the MPI library. Local logical ranks are summed in rank order,
// then MPI_Allreduce(SUM) combines processes in whatever order the library picks, then a division by
// the divisor, as DDP's default allreduce hook does. The summation order therefore changes with the
// world size and the process layout: the last bits differ, as seed 001 reports.
#include <algorithm>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/mpi_check.hpp"
#include "comm/reducer.hpp"
#include "comm/statistics.hpp"

namespace divsim {
namespace {

class MpiReducer final : public Reducer {
 public:
  MpiReducer(MPI_Comm comm, const ReduceLayout& layout) : comm_(comm), layout_(layout) {}

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    if (parts != 1) throw std::logic_error("dist.reduce=mpi reduces one gradient part per rank");
    const std::size_t n = layout_.num_params;
    float* acc = grads[0].data();
    for (std::size_t k = 1; k < grads.size(); ++k)
      for (std::size_t i = 0; i < n; ++i) acc[i] += grads[k][i];
    allreduce_in_place(acc, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_);
    const auto d = static_cast<float>(divisor);
    // The division and the copies to the other local ranks block by block, while a block is in cache.
    constexpr std::size_t kBlock = 4096;
    for (std::size_t lo = 0; lo < n; lo += kBlock) {
      const std::size_t m = std::min(kBlock, n - lo);
      if (d != 1.0f)  // x / 1 is x: one process with one rank skips the pass
        for (std::size_t i = lo; i < lo + m; ++i) acc[i] /= d;
      for (std::size_t k = 1; k < grads.size(); ++k) std::copy_n(acc + lo, m, grads[k].data() + lo);
    }
  }

  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_allreduce(values, layout_.rank_count * parts, out, comm_);
  }

 private:
  MPI_Comm comm_;
  ReduceLayout layout_;
};

}  // namespace

void sum_statistics_allreduce(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm) {
  const std::size_t n = out.size();
  if (values.size() != static_cast<std::size_t>(rows) * n) throw std::logic_error("sum_statistics: bad layout");
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r)
    for (std::size_t i = 0; i < n; ++i) out[i] += values[r * n + i];
  allreduce_in_place(out.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm);
}

void sum_statistics_in_rank_order(std::span<const double> values, int rows, std::span<double> out, MPI_Comm comm,
                                  std::vector<double>& scratch) {
  const std::size_t n = out.size();
  if (values.size() != static_cast<std::size_t>(rows) * n) throw std::logic_error("sum_statistics: bad layout");
  int processes = 1;
  MPI_Comm_size(comm, &processes);
  scratch.resize(values.size() * static_cast<std::size_t>(processes));
  mpi_check(MPI_Allgather(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, scratch.data(),
                          static_cast<int>(values.size()), MPI_DOUBLE, comm),
            "MPI_Allgather");
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t r = 0; r < scratch.size() / n; ++r)
    for (std::size_t i = 0; i < n; ++i) out[i] += scratch[r * n + i];
}

std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<MpiReducer>(comm, layout);
}

}  // namespace divsim
