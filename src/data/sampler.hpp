#pragma once
// Samplers: which global sample indices each rank reads at each micro-step of an epoch.
//
// `distributed` reproduces torch.utils.data.DistributedSampler followed by a DataLoader with
// drop_last=True on each rank (the shard is cut into micro-batches in order); `global_batch` gives every
// optimizer step one fixed contiguous slice of the epoch permutation, split contiguously across ranks,
// so the global batch does not depend on the world size. The epoch permutation is drawn from
// KeyedStream(seed, Stream::sampler, epoch), not from torch's generator. Deliberately not here: the
// loading of rows, augmentation and any fault that perturbs the plan (faults wrap this class).
#include <cstdint>
#include <span>
#include <vector>

#include "config/run_config.hpp"  // SamplerMode

namespace divsim {


struct SamplerShape {
  std::int64_t dataset_size;
  int num_replicas;          // world size (logical ranks)
  std::int64_t micro_batch;  // per-rank samples per micro-step
  int accum_steps;           // micro-steps per optimizer step
  bool drop_last;            // distributed mode only: drop the tail instead of wrap-around padding
  bool shuffle;
  std::uint64_t seed;  // sampler.seed
};

class Sampler {
 public:
  // Throws std::invalid_argument for non-positive sizes or when there is not one full step of data.
  Sampler(SamplerMode mode, const SamplerShape& shape);

  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Rebuilds the epoch permutation in place (no allocation). Like DistributedSampler.set_epoch.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }
  SamplerMode mode() const { return mode_; }
  const SamplerShape& shape() const { return shape_; }
  // Global sample indices of rank `rank`'s micro-batch `micro` of optimizer step `step_in_epoch`;
  // out.size() must equal micro_batch. Throws std::out_of_range for arguments outside the epoch.
  void micro_batch(int rank, std::int64_t step_in_epoch, int micro, std::span<std::int64_t> out) const;

 private:
  SamplerMode mode_;
  SamplerShape shape_;
  std::int64_t num_samples_ = 0;  // distributed: samples per rank shard (after padding/truncation)
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t epoch_ = 0;
  std::vector<std::int64_t> order_;  // the epoch's permutation of [0, dataset_size)
};

}  // namespace divsim
