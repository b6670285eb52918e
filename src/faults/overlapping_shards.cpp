// overlapping_shards: a rank reads the wrong part of the data (seed 002 §2.2/§4.2, seed 003 §2):
//   mode=duplicate_rank,of=J    the rank was started with rank J's id for the sampler: it reads J's shard;
//   mode=wrong_num_replicas,n=N its DistributedSampler was built with num_replicas=N: its shard overlaps
//                               others' (N < W) or leaves part of the data unseen (N > W);
//   mode=local_shuffle          it shards first (a fixed, unshuffled shard) and shuffles after, with its
//                               own per-rank order: it sees the same subset every epoch.
// Signature: /train/samples overlap between ranks (or miss samples) from the first affected step.
#include <algorithm>
#include <optional>

#include "faults/fault.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

enum class Mode { duplicate_rank, wrong_num_replicas, local_shuffle };
constexpr std::array<std::string_view, 3> kModes{"duplicate_rank", "wrong_num_replicas", "local_shuffle"};

class OverlappingShards final : public Fault {
 public:
  OverlappingShards(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    mode_ = choice_param("mode", Mode::duplicate_rank, kModes);
    if (mode_ == Mode::duplicate_rank) {
      of_ = integer_param("of", 0);
      if (of_ < 0 || of_ >= ctx.world_size) fail("of=" + std::to_string(of_) + " is not a rank below the world size");
    }
    if (mode_ == Mode::wrong_num_replicas) {
      n_ = integer_param("n", ctx.world_size * 2);
      if (n_ < 1 || n_ == ctx.world_size) fail("n must be >= 1 and differ from the world size");
      if (!spec_.ranks.all && spec_.ranks.max_rank() >= n_)
        fail("a rank >= n has no shard in a sampler with num_replicas=n");
      if (spec_.ranks.all && ctx.world_size > n_) fail("ranks=all needs n >= the world size");
    }
    finish_params();
    shards_.resize(static_cast<std::size_t>(ctx.world_size));
    shard_epochs_.assign(static_cast<std::size_t>(ctx.world_size), -1);
  }

  std::string adjust(std::int64_t, Replica&) const override {
    if (mode_ == Mode::duplicate_rank) return "reads rank " + std::to_string(of_) + "'s shard";
    if (mode_ == Mode::wrong_num_replicas) return "sampler built with num_replicas=" + std::to_string(n_);
    return "fixed unshuffled shard, shuffled locally with a per-rank seed";
  }

  bool plan_samples(const SampleRequest& req, Replica& r) const override {
    if (!active(req.step, r.rank)) return false;
    if (mode_ == Mode::duplicate_rank) {
      req.shared.micro_batch(static_cast<int>(of_), req.step_in_epoch, req.micro, r.samples);
      return true;
    }
    if (mode_ == Mode::wrong_num_replicas) {
      if (!wrong_) {
        SamplerShape shape = req.shared.shape();
        shape.num_replicas = static_cast<int>(n_);
        wrong_.emplace(req.shared.mode(), shape);
      }
      if (wrong_->epoch() != req.epoch) wrong_->set_epoch(req.epoch);
      // Its epoch length differs from the others': it wraps around within its own shard.
      wrong_->micro_batch(r.rank, req.step_in_epoch % wrong_->steps_per_epoch(), req.micro, r.samples);
      return true;
    }
    local_shuffle(req, r);
    return true;
  }

 private:
  // Shard of the unshuffled index list (rank, rank+W, ...), then a Fisher-Yates shuffle of it with the
  // rank's own seed, redrawn each epoch (kept per rank, rebuilt in place).
  void local_shuffle(const SampleRequest& req, Replica& r) const {
    const SamplerShape& shape = req.shared.shape();
    const std::int64_t W = shape.num_replicas, n = shape.dataset_size / W, mb = shape.micro_batch;
    auto& shard = shards_[static_cast<std::size_t>(r.rank)];
    auto& epoch = shard_epochs_[static_cast<std::size_t>(r.rank)];
    if (shard.empty() || epoch != req.epoch) {
      shard.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) shard[static_cast<std::size_t>(i)] = r.rank + W * i;
      const KeyedStream s(ctx_.cfg.sampler.seed + static_cast<std::uint64_t>(r.rank), Stream::sampler,
                          static_cast<std::uint32_t>(req.epoch), 0x5ca1ab1e);
      for (std::int64_t i = n - 1; i > 0; --i)
        std::swap(shard[static_cast<std::size_t>(i)],
                  shard[s.below(static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i + 1))]);
      epoch = req.epoch;
    }
    const std::int64_t first = (req.step_in_epoch * shape.accum_steps + req.micro) * mb;
    for (std::int64_t i = 0; i < mb; ++i) r.samples[static_cast<std::size_t>(i)] = shard[static_cast<std::size_t>((first + i) % n)];
  }

  Mode mode_ = Mode::duplicate_rank;
  std::int64_t of_ = 0, n_ = 0;
  mutable std::optional<Sampler> wrong_;
  mutable std::vector<std::vector<std::int64_t>> shards_;
  mutable std::vector<std::int64_t> shard_epochs_;
};

}  // namespace

DIVSIM_REGISTER_FAULT("overlapping_shards", OverlappingShards);

}  // namespace divsim
