#include "comm/ring.hpp"

#include <algorithm>
#include <stdexcept>

#include "comm/collectives.hpp"
#include "comm/mpi_check.hpp"
#include "comm/statistics.hpp"

namespace divsim {

std::vector<std::pair<std::size_t, std::size_t>> ddp_buckets(
    const std::vector<std::pair<std::size_t, std::size_t>>& tensors, double bucket_cap_mb) {
  constexpr double kFirstBucketBytes = 1024.0 * 1024.0;  // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  double cap = std::min(kFirstBucketBytes, bucket_cap_mb * 1024.0 * 1024.0);
  std::size_t hi = 0, lo = 0;
  bool open = false;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    const auto [off, size] = *it;
    if (!open) {
      hi = off + size;
      open = true;
    }
    lo = off;
    if (static_cast<double>((hi - lo) * sizeof(float)) >= cap) {
      buckets.emplace_back(lo, hi - lo);
      open = false;
      cap = bucket_cap_mb * 1024.0 * 1024.0;
    }
  }
  if (open) buckets.emplace_back(lo, hi - lo);
  return buckets;
}

RingAllreduce::RingAllreduce(MPI_Comm comm, const ReduceLayout& layout, const RingOrder& order)
    : comm_(comm), layout_(layout), order_(order), buckets_(ddp_buckets(layout.tensors, order.bucket_cap_mb)) {
  std::size_t largest = 0;
  for (const auto& b : buckets_) largest = std::max(largest, b.second);
  incoming_.resize(largest / static_cast<std::size_t>(layout.world_size) + 1);
}

void RingAllreduce::sum(std::span<const std::span<float>> buffers) {
  if (layout_.world_size == 1) return;
  for (const auto& [lo, n] : buckets_) {
    pass(buffers, lo, n, false);  // reduce-scatter
    pass(buffers, lo, n, true);   // allgather
  }
}

// W-1 ring steps over one bucket. In step s, rank r sends segment (r - s + rotation) mod W (reduce-scatter)
// or (r + 1 - s + rotation) mod W (allgather) to rank r+1, which adds it to its own (received + own) or
// stores it. A step's sent segment is never the one its sender receives, so the order of the local
// updates within a step does not matter.
void RingAllreduce::pass(std::span<const std::span<float>> buffers, std::size_t lo, std::size_t n, bool gather) {
  const int W = layout_.world_size;
  const int R = layout_.rank_count;
  int process = 0;
  MPI_Comm_rank(comm_, &process);
  const int processes = W / R;
  auto segment = [&](int c) {
    const std::size_t a = lo + n * static_cast<std::size_t>(c) / static_cast<std::size_t>(W);
    const std::size_t b = lo + n * static_cast<std::size_t>(c + 1) / static_cast<std::size_t>(W);
    return std::pair<std::size_t, std::size_t>(a, b - a);
  };
  auto local = [&](int rank) { return buffers[static_cast<std::size_t>(rank - layout_.rank_begin)]; };
  for (int s = 0; s < W - 1; ++s) {
    auto seg_of = [&](int sender) {
      const long long c = static_cast<long long>(sender) + (gather ? 1 : 0) - s + order_.rotation;
      return static_cast<int>(((c % W) + W) % W);
    };
    // Cross-process edge first (nonblocking), then the local edges, then finish the incoming one.
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    const int first = layout_.rank_begin, last = layout_.rank_begin + R - 1;
    const int from = (first - 1 + W) % W;  // sends to `first` from another process (when P > 1)
    const auto [in_off, in_len] = segment(seg_of(from));
    if (processes > 1) {
      mpi_check(MPI_Irecv(incoming_.data(), static_cast<int>(in_len), MPI_FLOAT, owner(from), s, comm_, &req[0]),
                "MPI_Irecv");
      const auto [out_off, out_len] = segment(seg_of(last));
      mpi_check(MPI_Isend(local(last).data() + out_off, static_cast<int>(out_len), MPI_FLOAT, owner((last + 1) % W), s,
                          comm_, &req[1]),
                "MPI_Isend");
    }
    for (int r = first; r <= last; ++r) {
      const int to = (r + 1) % W;
      if (owner(to) != process) continue;
      const auto [off, len] = segment(seg_of(r));
      const float* src = local(r).data() + off;
      float* dst = local(to).data() + off;
      if (gather) {
        std::copy_n(src, len, dst);
      } else {
        for (std::size_t i = 0; i < len; ++i) dst[i] = src[i] + dst[i];
        layout_.arithmetic.round(std::span<float>(dst, len));
      }
    }
    if (processes > 1) {
      wait_politely(req[0]);
      wait_politely(req[1]);
      float* dst = local(first).data() + in_off;
      if (gather) {
        std::copy_n(incoming_.data(), in_len, dst);
      } else {
        for (std::size_t i = 0; i < in_len; ++i) dst[i] = incoming_[i] + dst[i];
        layout_.arithmetic.round(std::span<float>(dst, in_len));
      }
    }
  }
}

namespace {

// dist.reduce=ring: the explicit ring sum, then a division by the divisor (as DDP averages); with
// dist.reduce_dtype or dist.divide, the contributions rounded and pre-divided first and every add rounded.
class RingReducer final : public Reducer {
 public:
  RingReducer(MPI_Comm comm, const ReduceLayout& layout)
      : comm_(comm), layout_(layout), ring_(comm, layout, RingOrder{layout.bucket_cap_mb, 0}) {}

  void allreduce_gradients(std::span<const std::span<float>> grads, int parts, double divisor) override {
    if (parts != 1) throw std::logic_error("dist.reduce=ring reduces one gradient part per rank");
    const ReduceArithmetic& a = layout_.arithmetic;
    const std::size_t n = layout_.num_params;
    for (const std::span<float>& g : grads) a.before(g.first(n), divisor, layout_.world_size);
    ring_.sum(grads);
    for (const std::span<float>& g : grads) a.after(g.first(n), divisor, layout_.world_size);
  }

  // In logical-rank order, so that W logical ranks on any number of processes give the same bits.
  void sum_statistics(std::span<const double> values, int parts, std::span<double> out) override {
    sum_statistics_in_rank_order(values, layout_.rank_count * parts, out, comm_, gathered_);
  }

 private:
  MPI_Comm comm_;
  ReduceLayout layout_;
  RingAllreduce ring_;
  std::vector<double> gathered_;
};

}  // namespace

std::unique_ptr<Reducer> make_ring_reducer(MPI_Comm comm, const ReduceLayout& layout) {
  return std::make_unique<RingReducer>(comm, layout);
}

}  // namespace divsim
