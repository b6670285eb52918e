// dist.reduce=deterministic when the step's canonical chunks are a power of two: the blueprint's fixed
// pairwise tree over the chunks' gradients, in float32, as a real deterministic allreduce sums.
//
// The trainer places every chunk in the tree by the global positions it holds, so the places do not
// depend on the world size, and such that each logical rank's chunks are one subtree
// (ReduceLayout::tree_slots, tree_block). A rank first sums its own chunks into its subtree's root
// (combine_local_parts: that root is the rank's own gradient, which the step records); then every
// process sums, for its 1/P of the elements, the W roots in the tree's order, after one exchange of
// the roots' slices, and the slices are gathered back. When every process runs on one node, the
// ranks' gradient areas are allocated in an MPI shared-memory window instead, and the processes read
// each other's roots and sums in place between barriers: no copies into MPI buffers, no page pinning.
// Each element is the same tree of the same float32 chunk gradients at every world size and process
// layout, and with or without the window, so the bits are too. Compared with
// the exact fixed-point sum (deterministic_reducer.cpp, used for other chunk counts) it moves floats
// instead of 64-bit integers and has no passes for the maxima and the conversions; its rounding is
// that of a pairwise float32 sum, as a tree allreduce such as NCCL's gives.
#include <sys/statvfs.h>

#include <algorithm>
#include <bit>
#include <exception>
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
  Normalisation normalisation(double rank_scale, double targets, int) const override {
    return exact_sum_normalisation(rank_scale, targets);
  }
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
    leaves_.resize(std::max(W, layout.tree_slots.size()));
    if (layout.share_node_memory && processes_ > 1) share_node_memory();
    if (window_ == MPI_WIN_NULL) {
      const std::size_t mine = begin_[static_cast<std::size_t>(process_) + 1] - begin_[static_cast<std::size_t>(process_)];
      remote_.resize((W - R) * mine);
      requests_.reserve(2 * (P - 1) * R);
    }
  }

  ~TreeReducer() override {
    // Freeing the window is collective. A process unwinding an exception is on its way to MPI_Abort (or
    // to a stop every process takes, where MPI_Finalize frees it): waiting for the others could hang it.
    if (window_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) {
      MPI_Win_unlock_all(window_);
      MPI_Win_free(&window_);
    }
  }
  TreeReducer(const TreeReducer&) = delete;
  TreeReducer& operator=(const TreeReducer&) = delete;

  std::span<float> gradient_memory(int local_rank) override {
    if (window_ == MPI_WIN_NULL) return {};
    return {area(static_cast<std::size_t>(process_), static_cast<std::size_t>(local_rank)), area_floats()};
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
    if (window_ != MPI_WIN_NULL) {
      allreduce_in_window(grads, divisor);
      return;
    }
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
    sum_my_block(grads[0].data() + lo, m, divisor);
    if (processes_ > 1) {
      MPI_Request gather;
      mpi_check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, grads[0].data(), counts_.data(), offsets_.data(),
                                MPI_FLOAT, comm_, &gather),
                "MPI_Iallgatherv");
      wait_politely(gather);
    }
    copy_to_other_local_ranks(grads);
  }

  // Statistics are a few numbers per chunk: their exact fixed-point sum costs nothing worth saving.
  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_fixed_point(values, layout_.rank_count * parts, out, comm_, stat_scratch_);
  }

 private:
  // The W leaves_ are set: their tree's sum of m elements goes to out, divided by divisor.
  void sum_my_block(float* out, std::size_t m, double divisor) {
    pairwise_sum(std::span<const float* const>(leaves_.data(), static_cast<std::size_t>(layout_.world_size)), m, out);
    const auto d = static_cast<float>(divisor);
    if (d != 1.0f)
      for (std::size_t i = 0; i < m; ++i) out[i] /= d;
  }

  void copy_to_other_local_ranks(std::span<const std::span<float>> grads) {
    for (std::size_t k = 1; k < grads.size(); ++k) std::copy_n(grads[0].data(), layout_.num_params, grads[k].data());
  }

  // Every process allocates its ranks' gradient areas in one window of the node's shared memory, when
  // all processes are on one node and its /dev/shm (where MPICH puts the window's file) has room for
  // twice the window: a tmpfs that fills up answers a write to a page it cannot back with SIGBUS, and
  // containers often mount only 64 MB. All must agree: a window needs every process of the communicator.
  void share_node_memory() {
    MPI_Comm node = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, process_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    const std::size_t bytes = layout_.rank_count * area_floats() * sizeof(float);
    struct statvfs shm{};
    const bool room = statvfs("/dev/shm", &shm) == 0 &&
                      static_cast<double>(shm.f_bavail) * static_cast<double>(shm.f_frsize) >=
                          2.0 * static_cast<double>(bytes) * processes_;
    int usable = node_size == processes_ && room ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &usable, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (!usable) return;
    if (layout_.rank_begin != process_ * layout_.rank_count)
      throw std::logic_error("tree reduction: processes must hold equal, consecutive blocks of ranks");
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each process's pages on its own NUMA node
    float* mine = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), sizeof(float), info, comm_, &mine, &window_);
    MPI_Info_free(&info);
    mpi_check(rc, "MPI_Win_allocate_shared");
    mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_), "MPI_Win_lock_all");
    for (int q = 0; q < processes_; ++q) {
      MPI_Aint size = 0;
      int disp_unit = 0;
      float* base = nullptr;
      mpi_check(MPI_Win_shared_query(window_, q, &size, &disp_unit, &base), "MPI_Win_shared_query");
      bases_.push_back(base);
    }
  }

  std::size_t area_floats() const { return layout_.tree_slots.size() * layout_.num_params; }
  // Local rank k of process q's gradient area in the window (every process has rank_count ranks).
  float* area(std::size_t q, std::size_t k) const { return bases_[q] + k * area_floats(); }

  // Until every process has arrived, and with everything written before it visible to all after it.
  void node_barrier() {
    MPI_Win_sync(window_);
    MPI_Request barrier;
    mpi_check(MPI_Ibarrier(comm_, &barrier), "MPI_Ibarrier");
    wait_politely(barrier);
    MPI_Win_sync(window_);
  }

  // The same sums as the message path, reading the roots in place: (1) all roots final, each process sums
  // its block of elements into its first rank's root; (2) all blocks summed, each copies the others'
  // blocks; (3) all copied, so that no process writes its gradients (the next step) while another
  // still reads them.
  void allreduce_in_window(std::span<const std::span<float>> grads, double divisor) {
    const auto W = static_cast<std::size_t>(layout_.world_size), R = static_cast<std::size_t>(layout_.rank_count);
    const auto me = static_cast<std::size_t>(process_);
    const std::size_t lo = begin_[me], m = begin_[me + 1] - lo;
    if (grads[0].data() != area(me, 0)) throw std::logic_error("tree reduction: the gradients are not in the window");
    node_barrier();
    for (std::size_t pos = 0; pos < W; ++pos) {
      const auto g = static_cast<std::size_t>(rank_at_[pos]);
      leaves_[pos] = area(g / R, g % R) + lo;
    }
    sum_my_block(grads[0].data() + lo, m, divisor);
    node_barrier();
    for (std::size_t q = 0; q < static_cast<std::size_t>(processes_); ++q)
      if (q != me) std::copy_n(area(q, 0) + begin_[q], begin_[q + 1] - begin_[q], grads[0].data() + begin_[q]);
    node_barrier();
    copy_to_other_local_ranks(grads);
  }

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
  std::vector<float> remote_;           // [W - R][my block] the other processes' roots (without the window)
  std::vector<const float*> leaves_;
  std::vector<MPI_Request> requests_;
  FixedPointScratch stat_scratch_;
  MPI_Win window_ = MPI_WIN_NULL;       // the node-shared gradient areas, when all processes share a node
  std::vector<float*> bases_;           // [P] each process's part of the window
};

}  // namespace

std::unique_ptr<Reducer> make_tree_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<TreeReducer>(comm, layout);
}

}  // namespace divsim
