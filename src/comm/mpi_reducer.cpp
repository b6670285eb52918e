// dist.reduce=mpi: what a user gets from the MPI library. Local logical ranks are summed in rank order,
// then MPI_Allreduce(SUM) combines processes in whatever order the library picks, then a division by
// the divisor. The summation order therefore changes with the world size and the process layout: the
// last bits differ, as seed 001 reports. With dist.reduce_dtype or dist.divide (comm/reduce_arithmetic.hpp)
// the contributions are rounded and pre-divided first, every add is rounded (the MPI library's adds
// through a user-defined operation), and the sum is divided by what is left.
#include <algorithm>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/mpi_check.hpp"
#include "comm/reduce_arithmetic.hpp"
#include "comm/reducer.hpp"
#include "comm/statistics.hpp"

namespace divsim {
namespace {

// MPI_SUM of floats whose every add is rounded to a 16-bit format: MPI_User_function takes no state, so
// one function per format.
template <MatmulFormat F>
void rounded_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const float*>(in);
  auto* b = static_cast<float*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = a[i] + b[i];
  round_to_format(std::span<float>(b, static_cast<std::size_t>(*len)), F);
}

MPI_Op make_sum_op(ReduceDtype dtype) {
  if (dtype == ReduceDtype::fp32) return MPI_SUM;
  MPI_Op op = MPI_OP_NULL;
  mpi_check(MPI_Op_create(dtype == ReduceDtype::bf16 ? rounded_sum<MatmulFormat::bf16> : rounded_sum<MatmulFormat::fp16>,
                          1, &op),
            "MPI_Op_create");
  return op;
}

class MpiReducer final : public Reducer {
 public:
  MpiReducer(MPI_Comm comm, const ReduceLayout& layout)
      : comm_(comm), layout_(layout), sum_(make_sum_op(layout.arithmetic.dtype)) {}
  ~MpiReducer() override {
    if (sum_ != MPI_SUM) MPI_Op_free(&sum_);
  }
  MpiReducer(const MpiReducer&) = delete;
  MpiReducer& operator=(const MpiReducer&) = delete;

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    if (parts != 1) throw std::logic_error("dist.reduce=mpi reduces one gradient part per rank");
    // The arithmetic's roundings and pre-division do nothing in float32 divided after the sum.
    const ReduceArithmetic& a = layout_.arithmetic;
    const std::size_t n = layout_.num_params;
    for (const std::span<float>& g : grads) a.before(g.first(n), divisor, layout_.world_size);
    const std::span<float> acc = grads[0].first(n);
    for (std::size_t k = 1; k < grads.size(); ++k) {
      for (std::size_t i = 0; i < n; ++i) acc[i] += grads[k][i];
      a.round(acc);
    }
    allreduce_in_place(acc.data(), static_cast<int>(n), MPI_FLOAT, sum_, comm_);
    // The division and the copies to the other local ranks block by block, while a block is in cache.
    constexpr std::size_t kBlock = 4096;
    for (std::size_t lo = 0; lo < n; lo += kBlock) {
      const std::size_t m = std::min(kBlock, n - lo);
      a.after(acc.subspan(lo, m), divisor, layout_.world_size);
      for (std::size_t k = 1; k < grads.size(); ++k) std::copy_n(acc.data() + lo, m, grads[k].data() + lo);
    }
  }

  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_allreduce(values, layout_.rank_count * parts, out, comm_);
  }

 private:
  MPI_Comm comm_;
  ReduceLayout layout_;
  MPI_Op sum_;
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
