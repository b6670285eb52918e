// Sampler implementation: the epoch permutation (Fisher-Yates on a keyed stream) and the index
// arithmetic of both modes. Nothing is materialised per rank: a micro-batch is computed from the
// permutation on demand, so the step loop never allocates. Deliberately not here: reading data.
#include "data/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "numerics/philox.hpp"

namespace divsim {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("sampler: " + what);
}

}  // namespace

Sampler::Sampler(SamplerMode mode, const SamplerShape& shape)
    : mode_(mode),
      shape_(shape),
      order_(static_cast<std::size_t>(std::max<std::int64_t>(shape.dataset_size, 0))) {
  require(shape.dataset_size > 0, "dataset_size " + std::to_string(shape.dataset_size) + " must be > 0");
  require(shape.num_replicas > 0, "num_replicas " + std::to_string(shape.num_replicas) + " must be > 0");
  require(shape.micro_batch > 0, "micro_batch " + std::to_string(shape.micro_batch) + " must be > 0");
  require(shape.accum_steps > 0, "accum_steps " + std::to_string(shape.accum_steps) + " must be > 0");
  const std::int64_t n = shape.dataset_size, w = shape.num_replicas;
  const std::int64_t per_rank_step = shape.micro_batch * shape.accum_steps;
  if (mode == SamplerMode::distributed) {
    // DistributedSampler: drop_last with a remainder -> ceil((N - W) / W) = floor(N / W); else ceil(N / W).
    num_samples_ = shape.drop_last && n % w != 0 ? n / w : (n + w - 1) / w;
    steps_per_epoch_ = num_samples_ / per_rank_step;  // each rank's DataLoader drops its last partial batch
    require(steps_per_epoch_ > 0, std::to_string(n) + " samples give shards of " +
                                      std::to_string(num_samples_) + " per rank over " + std::to_string(w) +
                                      " ranks, less than one step of " + std::to_string(per_rank_step) +
                                      " (micro_batch x accum_steps)");
  } else {
    const std::int64_t global = w * per_rank_step;
    steps_per_epoch_ = n / global;
    require(steps_per_epoch_ > 0, std::to_string(n) + " samples are less than one global batch of " +
                                      std::to_string(global) + " (ranks x accum_steps x micro_batch)");
  }
  set_epoch(0);
}

void Sampler::set_epoch(std::int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument("sampler: epoch " + std::to_string(epoch) + " must be >= 0");
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), std::int64_t{0});
  if (!shape_.shuffle) return;
  // Fisher-Yates, from the top: for i = N-1 .. 1, j = below(i, i + 1), swap(order[i], order[j]).
  const KeyedStream s(shape_.seed, Stream::sampler, static_cast<std::uint32_t>(epoch),
                      static_cast<std::uint32_t>(static_cast<std::uint64_t>(epoch) >> 32));
  for (std::size_t i = order_.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(s.below(i, i + 1));
    std::swap(order_[i], order_[j]);
  }
}

void Sampler::micro_batch(int rank, std::int64_t step_in_epoch, int micro,
                          std::span<std::int64_t> out) const {
  if (rank < 0 || rank >= shape_.num_replicas || step_in_epoch < 0 || step_in_epoch >= steps_per_epoch_ ||
      micro < 0 || micro >= shape_.accum_steps ||
      static_cast<std::int64_t>(out.size()) != shape_.micro_batch) {
    throw std::out_of_range(
        "sampler: micro_batch(rank " + std::to_string(rank) + ", step " + std::to_string(step_in_epoch) +
        ", micro " + std::to_string(micro) + ", " + std::to_string(out.size()) + " slots) outside " +
        std::to_string(shape_.num_replicas) + " ranks, " + std::to_string(steps_per_epoch_) + " steps, " +
        std::to_string(shape_.accum_steps) + " micro-steps, micro_batch " +
        std::to_string(shape_.micro_batch));
  }
  const std::int64_t mb = shape_.micro_batch, accum = shape_.accum_steps, w = shape_.num_replicas;
  const std::int64_t n = shape_.dataset_size;
  if (mode_ == SamplerMode::distributed) {
    // Shard position k of rank r is position r + k*W of the padded list, whose position p holds
    // order[p mod N]: wrap-around padding (repeated if needed) and drop_last truncation both reduce to this.
    const std::int64_t first = (step_in_epoch * accum + micro) * mb;
    for (std::int64_t k = 0; k < mb; ++k) {
      out[static_cast<std::size_t>(k)] = order_[static_cast<std::size_t>((rank + (first + k) * w) % n)];
    }
  } else {
    const std::int64_t first = step_in_epoch * w * accum * mb + (rank * accum + micro) * mb;
    for (std::int64_t k = 0; k < mb; ++k) {
      out[static_cast<std::size_t>(k)] = order_[static_cast<std::size_t>(first + k)];
    }
  }
}

}  // namespace divsim
