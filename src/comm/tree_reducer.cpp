// dist.reduce=deterministic when the step's canonical chunks are a power of two: the blueprint's fixed
// pairwise tree over the chunks' gradients, in float32, as a real deterministic allreduce sums.
//
// The trainer places every chunk in the tree by the global positions it holds, so the places do not
// depend on the world size, and such that each logical rank's chunks are one subtree
// (ReduceLayout::tree_slots, tree_block). A rank first sums its own chunks into its subtree's root
// (combine_local_parts: that root is the rank's own gradient, which the step records); then every
// process sums, for its 1/P of the elements, the W roots in the tree's order, after one exchange of
// the roots' slices, and the slices are gathered back. Each element is the same tree of the same
// float32 chunk gradients at every world size and process layout, so the bits are too. Compared with
// the exact fixed-point sum (deterministic_reducer.cpp, used for other chunk counts) it moves floats
// instead of 64-bit integers and has no passes for the maxima and the conversions; its rounding is
// that of a pairwise float32 sum, as a tree allreduce such as NCCL's gives.
#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "comm/collectives.hpp"
#include "comm/mpi_check.hpp"
#include "comm/reducer.hpp"
#include "comm/statistics.hpp"
#include "numerics/pairwise_sum.hpp"

namespace divsim {
namespace {

constexpr int kTreeTag = 32752;  // below the MPI minimum MPI_TAG_UB (32767), clear of the ring's step tags

class TreeReducer final : public Reducer {
 public:
  TreeReducer(MPI_Comm comm, const ReduceLayout& layout)
      : comm_(comm), layout_(layout) {
    MPI_Comm_rank(comm, &process_);
    MPI_Comm_size(comm, &processes_);
    const auto W = static_cast<std::size_t>(layout.world_size), R = static_cast<std::size_t>(layout.rank_count);
    if (!std::has_single_bit(layout.tree_slots.size()) || layout.tree_slots[0] != 0 || layout.tree_block.size() != W ||
        !std::has_single_bit(W) || (layout.tree_siblings_summed && layout.tree_slots.size() < 2))
      throw std::logic_error("tree reduction: bad tree layout");
    // The slots combine_local_parts sums: the leaves, or with the siblings summed the lower slot of each
    // pair, whose first-level sums are the leaves of the rest of the rank's subtree.
    const std::vector<int>& leaves = layout.tree_slots;
    for (std::size_t i = 0; i < leaves.size(); i += layout.tree_siblings_summed ? 2 : 1)
      local_slots_.push_back(layout.tree_siblings_summed ? std::min(leaves[i], leaves[i + 1]) : leaves[i]);
    rank_at_.assign(W, -1);
    for (std::size_t g = 0; g < W; ++g) rank_at_.at(static_cast<std::size_t>(layout.tree_block[g])) = static_cast<int>(g);
    if (std::count(rank_at_.begin(), rank_at_.end(), -1) != 0) throw std::logic_error("tree reduction: tree_block is no permutation");
    // Process q sums elements [begin_[q], begin_[q + 1]).
    const std::size_t n = layout.num_params, P = static_cast<std::size_t>(processes_);
    for (std::size_t q = 0; q <= P; ++q) begin_.push_back(n * q / P);
    for (std::size_t q = 0; q < P; ++q) {
      counts_.push_back(static_cast<int>(begin_[q + 1] - begin_[q]));
      offsets_.push_back(static_cast<int>(begin_[q]));
    }
    const std::size_t mine = begin_[static_cast<std::size_t>(process_) + 1] - begin_[static_cast<std::size_t>(process_)];
    remote_.resize((W - R) * mine);
    leaves_.resize(std::max(W, layout.tree_slots.size()));
    requests_.reserve(2 * (P - 1) * R);
  }

  int combine_local_parts(std::span<const std::span<float>> grads, int parts) override {
    const std::size_t L = layout_.tree_slots.size(), n = layout_.num_params;
    if (static_cast<std::size_t>(parts) != L) throw std::logic_error("tree reduction: parts do not match the tree layout");
    for (const std::span<float>& g : grads) {
      for (std::size_t i = 0; i < local_slots_.size(); ++i) leaves_[i] = g.data() + static_cast<std::size_t>(local_slots_[i]) * n;
      pairwise_sum(std::span<const float* const>(leaves_.data(), local_slots_.size()), n, g.data());
    }
    return 1;
  }

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    if (parts != 1) throw std::logic_error("tree reduction: combine_local_parts comes first");
    const std::size_t W = static_cast<std::size_t>(layout_.world_size), R = static_cast<std::size_t>(layout_.rank_count);
    const auto me = static_cast<std::size_t>(process_);
    const std::size_t lo = begin_[me], m = begin_[me + 1] - lo;
    // My block of every remote rank's root in, every other block of my ranks' roots out (posted in rank
    // order on both sides, which is how MPI matches messages of one tag between two processes).
    requests_.clear();
    for (std::size_t q = 0; q < static_cast<std::size_t>(processes_); ++q) {
      if (q == me) continue;
      for (std::size_t k = 0; k < R; ++k) {
        requests_.emplace_back();
        mpi_check(MPI_Irecv(remote(q * R + k), static_cast<int>(m), MPI_FLOAT, static_cast<int>(q), kTreeTag, comm_,
                            &requests_.back()),
                  "MPI_Irecv");
      }
      for (std::size_t k = 0; k < R; ++k) {
        requests_.emplace_back();
        mpi_check(MPI_Isend(grads[k].data() + begin_[q], counts_[q], MPI_FLOAT, static_cast<int>(q), kTreeTag, comm_,
                            &requests_.back()),
                  "MPI_Isend");
      }
    }
    for (MPI_Request& r : requests_) wait_politely(r);
    for (std::size_t pos = 0; pos < W; ++pos) {
      const auto g = static_cast<std::size_t>(rank_at_[pos]);
      const bool local = g >= static_cast<std::size_t>(layout_.rank_begin) && g < static_cast<std::size_t>(layout_.rank_begin) + R;
      leaves_[pos] = local ? grads[g - static_cast<std::size_t>(layout_.rank_begin)].data() + lo : remote(g);
    }
    float* out = grads[0].data() + lo;
    pairwise_sum(std::span<const float* const>(leaves_.data(), W), m, out);
    const auto d = static_cast<float>(divisor);
    if (d != 1.0f)
      for (std::size_t i = 0; i < m; ++i) out[i] /= d;
    if (processes_ > 1) {
      MPI_Request gather;
      mpi_check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, grads[0].data(), counts_.data(), offsets_.data(),
                                MPI_FLOAT, comm_, &gather),
                "MPI_Iallgatherv");
      wait_politely(gather);
    }
    for (std::size_t k = 1; k < grads.size(); ++k) std::copy_n(grads[0].data(), layout_.num_params, grads[k].data());
  }

  // Statistics are a few numbers per chunk: their exact fixed-point sum costs nothing worth saving.
  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_fixed_point(values, layout_.rank_count * parts, out, comm_, stat_scratch_);
  }

 private:
  // Where remote logical rank g's slice of my block is received.
  float* remote(std::size_t g) {
    const std::size_t R = static_cast<std::size_t>(layout_.rank_count), me = static_cast<std::size_t>(process_);
    const std::size_t slot = g < me * R ? g : g - R;  // remote ranks in rank order, mine left out
    return remote_.data() + slot * (begin_[me + 1] - begin_[me]);
  }

  MPI_Comm comm_;
  ReduceLayout layout_;
  int process_ = 0, processes_ = 1;
  std::vector<int> local_slots_;        // the gradient slots a rank's own sum adds, in the tree's order
  std::vector<int> rank_at_;            // the logical rank at each position of the ranks' subtrees
  std::vector<std::size_t> begin_;      // [P + 1] element blocks
  std::vector<int> counts_, offsets_;   // the blocks for MPI_Iallgatherv
  std::vector<float> remote_;           // [W - R][my block] the other processes' roots
  std::vector<const float*> leaves_;
  std::vector<MPI_Request> requests_;
  FixedPointScratch stat_scratch_;
};

}  // namespace

std::unique_ptr<Reducer> make_tree_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<TreeReducer>(comm, layout);
}

}  // namespace divsim
