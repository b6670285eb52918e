#include "comm/reducer.hpp"

#include <stdexcept>

namespace divsim {

std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm, const ReduceLayout& layout);
std::unique_ptr<Reducer> make_deterministic_reducer(MPI_Comm comm, const ReduceLayout& layout);
std::unique_ptr<Reducer> make_ring_reducer(MPI_Comm comm, const ReduceLayout& layout);
std::unique_ptr<Reducer> make_tree_reducer(MPI_Comm comm, const ReduceLayout& layout);

Normalisation exact_sum_normalisation(double rank_scale, double targets) { return {1.0f, targets, rank_scale}; }

std::unique_ptr<Reducer> make_reducer(ReduceMode mode, MPI_Comm comm, const ReduceLayout& layout) {
  switch (mode) {
    case ReduceMode::mpi: return make_mpi_reducer(comm, layout);
    case ReduceMode::ring: return make_ring_reducer(comm, layout);
    case ReduceMode::deterministic:
      return layout.tree_block.empty() ? make_deterministic_reducer(comm, layout) : make_tree_reducer(comm, layout);
  }
  throw std::logic_error("unreachable");
}

}  // namespace divsim
