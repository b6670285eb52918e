// unsynced_seed: a rank seeds one random stream with base + rank (or the clock) instead of the shared
// seed (seed 000 §2, seed 002 §3.1/§4.1: "each rank shuffles with its own seed"; seed 001: seeds derived
// from the rank). stream=init also skips the broadcast of rank 0's parameters, as a script that never
// calls DDP's constructor-time broadcast would: the replicas differ from step 0. stream=sampler makes the
// rank's epoch permutation its own (shards overlap, some samples are never seen); dropout / augment give
// it its own masks / augmentations.
#include <memory>
#include <optional>

#include "faults/fault.hpp"

namespace divsim {
namespace {

enum class Stream { init, sampler, dropout, augment };
constexpr std::array<std::string_view, 4> kStreams{"init", "sampler", "dropout", "augment"};
constexpr std::array<std::string_view, 2> kModes{"rank_offset", "clock"};

class UnsyncedSeed final : public Fault {
 public:
  UnsyncedSeed(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    stream_ = choice_param("stream", Stream::init, kStreams);
    clock_ = choice_param("mode", 0, kModes) == 1;
    finish_params();
    if (stream_ == Stream::dropout && !ctx.model_has_dropout)
      fail("stream=dropout needs a model with dropout layers (model.type=" + ctx.cfg.model.type +
           " has none; the mlp has them with model.dropout > 0)");
    if (stream_ == Stream::augment && !ctx.cfg.data.augment) fail("stream=augment needs data.augment=true");
    if (stream_ == Stream::sampler) samplers_.resize(static_cast<std::size_t>(ctx.world_size));
  }

  std::string prepare(Replica& r) const override {
    if (stream_ != Stream::init) return {};
    r.init_seed = seed_for(r.rank);
    r.receives_init = false;
    return "init seed " + std::to_string(r.init_seed) + ", rank 0's parameters not broadcast";
  }

  std::string adjust(std::int64_t, Replica& r) const override {
    if (stream_ == Stream::dropout) r.knobs.dropout_seed = seed_for(r.rank);
    if (stream_ == Stream::augment) r.knobs.augment_seed = seed_for(r.rank);
    if (stream_ == Stream::init) return {};
    return std::string(kStreams[static_cast<std::size_t>(stream_)]) + " seed " + std::to_string(seed_for(r.rank)) +
           " instead of the shared one";
  }

  bool plan_samples(const SampleRequest& req, Replica& r) const override {
    if (stream_ != Stream::sampler || !active(req.step, r.rank)) return false;
    auto& own = samplers_[static_cast<std::size_t>(r.rank)];
    if (!own) {
      SamplerShape shape = req.shared.shape();
      shape.seed = seed_for(r.rank);
      own.emplace(req.shared.mode(), shape);
    }
    if (own->epoch() != req.epoch) own->set_epoch(req.epoch);
    own->micro_batch(r.rank, req.step_in_epoch, req.micro, r.samples);
    return true;
  }

 private:
  std::uint64_t base() const {
    if (stream_ == Stream::sampler) return ctx_.cfg.sampler.seed;
    return ctx_.cfg.run.seed;
  }
  // rank_offset: base + rank (the classic bug); clock: a per-run, per-rank time-derived seed.
  std::uint64_t seed_for(int rank) const {
    if (!clock_) return base() + static_cast<std::uint64_t>(rank);
    return (ctx_.nonce ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(rank + 1))) * 0xBF58476D1CE4E5B9ull;
  }

  Stream stream_ = Stream::init;
  bool clock_ = false;
  mutable std::vector<std::optional<Sampler>> samplers_;
};

}  // namespace

DIVSIM_REGISTER_FAULT("unsynced_seed", UnsyncedSeed);

}  // namespace divsim
