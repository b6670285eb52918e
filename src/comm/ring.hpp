#pragma once
// An explicit ring allreduce over DDP-style buckets, the way NCCL's ring sums (seed 000 §4.2).
//
// Buckets: parameters in reverse order (the order backward produces them), cut when a bucket reaches its
// cap (1 MiB for the first bucket, bucket_cap_mb after, as torch DDP does); a tensor is never split.
// Each bucket is cut into W segments; segment c is reduced around the ring starting at rank
// (c - rotation) mod W, each rank adding its own value to the partial sum it received, then gathered.
// So an element's summation order depends on its position in its bucket, on W and on the rotation:
// change the bucket size or the world size and the last bits change.
#include <mpi.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "comm/reducer.hpp"

namespace divsim {

struct RingOrder {
  double bucket_cap_mb = 25.0;
  std::uint32_t rotation = 0;  // which rank starts each segment's sum (0: segment c starts at rank c)
  bool operator==(const RingOrder&) const = default;
};

// [offset, offset+size) ranges of the flat gradient, in bucket order (reverse parameter order).
std::vector<std::pair<std::size_t, std::size_t>> ddp_buckets(
    const std::vector<std::pair<std::size_t, std::size_t>>& tensors, double bucket_cap_mb);

// Sums in place: afterwards every buffer holds the sum over all logical ranks. buffers[k] is this
// process's logical rank layout.rank_begin + k. Collective over comm.
class RingAllreduce {
 public:
  RingAllreduce(MPI_Comm comm, const ReduceLayout& layout, const RingOrder& order);
  void sum(std::span<const std::span<float>> buffers);
  const RingOrder& order() const { return order_; }

 private:
  int owner(int rank) const { return rank / layout_.rank_count; }  // process of a logical rank
  void pass(std::span<const std::span<float>> buffers, std::size_t lo, std::size_t n, bool gather);

  MPI_Comm comm_;
  ReduceLayout layout_;
  RingOrder order_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  std::vector<float> incoming_;
};

}  // namespace divsim
