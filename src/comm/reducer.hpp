#pragma once
// Gradient and statistics reduction behind one interface, so the step loop never knows which algorithm
// (or which fault) is summing. Every call is collective over the communicator.
//
// Ranks here are *logical* ranks: a process may simulate several consecutive ones (dist.world_size =
// W logical ranks on P processes). Each call receives the contributions of this process's logical ranks
// in rank order; a reducer combines them and the other processes' the way its mode prescribes.
//
// Contributions come in "parts": a rank's gradient may be several partial sums (deterministic mode cuts
// each batch into fixed chunks of samples) laid out [parts][n]. Modes that do not cut use parts = 1.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/reduce_arithmetic.hpp"
#include "config/run_config.hpp"  // ReduceMode

namespace divsim {


struct ReduceLayout {
  int world_size = 1;                 // logical ranks W
  int rank_begin = 0, rank_count = 1; // this process's logical ranks
  // The gradient's tensors as [offset, offset+size) ranges of the flat buffer, in parameter order.
  std::vector<std::pair<std::size_t, std::size_t>> tensors;
  std::size_t num_params = 0;
  double bucket_cap_mb = 25.0;        // ring: DDP bucket_cap_mb
  // deterministic: when the step's canonical chunks are a power of two, they are summed by one fixed
  // pairwise tree (comm/tree_reducer.cpp) in which every logical rank's chunks form one subtree.
  // tree_slots: a rank's gradient parts in the tree's order; tree_block[g]: logical rank g's position
  // among the ranks' subtrees. Empty: the exact fixed-point sum (comm/deterministic_reducer.cpp).
  std::vector<int> tree_slots, tree_block;
  // The engine has added each pair of sibling leaves (tree_slots[2j], tree_slots[2j + 1]) into the lower
  // of their two slots, which then holds the tree's first-level sum.
  bool tree_siblings_summed = false;
  // tree: processes that all run on one node read each other's gradients in a shared-memory window
  // instead of sending them (dist.shared_memory). The bits are the same either way.
  bool share_node_memory = true;
  // mpi, ring: the dtype the gradient is sent and summed in, and where the division happens.
  ReduceArithmetic arithmetic;
};

// How a step's loss normalisation (the mean over its `targets`: rank_scale = W / targets) splits between
// the backward pass and the reduction, which is the reduction mode's business: DDP scales each rank's
// loss by rank_scale before backward and divides the summed gradients by W; a mode that sums unscaled
// partials exactly divides by the targets at the end (exact_sum_normalisation).
struct Normalisation {
  float backward_scale = 1.0f;  // the engine's factor on the loss gradient
  double divisor = 1.0;         // what allreduce_gradients divides the sum by
  double own_scale = 1.0;       // from a rank's (loss-unscaled) gradient buffer to its own mean gradient
};
Normalisation exact_sum_normalisation(double rank_scale, double targets);

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual Normalisation normalisation(double rank_scale, double targets, int world_size) const {
    (void)targets;
    return {static_cast<float>(rank_scale), static_cast<double>(world_size), 1.0};
  }
  // grads[k]: local logical rank k's gradient area, `parts` partials of num_params floats each.
  // Afterwards the first num_params floats of every grads[k] hold (sum over all ranks and parts) / divisor.
  virtual void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) = 0;
  // Before anything reads a rank's gradient: a mode that combines each rank's parts on its own does so
  // into the first part and returns 1; the others leave them and return parts. What it returns is the
  // `parts` of everything after, allreduce_gradients included.
  virtual int combine_local_parts(std::span<const std::span<float>> grads, int parts) {
    (void)grads;
    return parts;
  }
  // values: [rank_count][parts][n] partial sums; out[n] = their sum over all logical ranks and parts.
  virtual void sum_statistics(std::span<const double> values, int parts, std::span<double> out) = 0;
  // Memory for local rank k's gradient area that this reducer wants the engine to use (the other
  // processes read it there); empty: the rank allocates its own.
  virtual std::span<float> gradient_memory(int local_rank) {
    (void)local_rank;
    return {};
  }
};

std::unique_ptr<Reducer> make_reducer(ReduceMode mode, MPI_Comm comm, const ReduceLayout& layout);

}  // namespace divsim
