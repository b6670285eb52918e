// reduction_order: the order in which gradients are summed differs (seed 000 §4.2: different bucket
// sizes or NCCL algorithms; non-deterministic atomics).
//   mode=bucket,cap_mb=X  the chosen ranks' reduced gradient comes from a ring over buckets of X MiB
//                         (their DDP was built with another bucket_cap_mb);
//   mode=shuffle          each step the ring starts each segment at a different rank, drawn from a
//                         clock-seeded stream: reruns differ.
// Signature: last-bit differences from step 1 that grow with steps; with chosen ranks, replicas split
// in the low bits; with mode=shuffle on all ranks they stay in sync but two reruns differ.
#include "comm/reducer.hpp"
#include "faults/fault.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

constexpr std::array<std::string_view, 2> kModes{"bucket", "shuffle"};

class ReductionOrder final : public Fault {
 public:
  ReductionOrder(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    shuffle_ = choice_param("mode", 0, kModes) == 1;
    cap_mb_ = shuffle_ ? ctx.cfg.dist.bucket_cap_mb : number_param("cap_mb", 1.0);
    finish_params();
    if (!(cap_mb_ > 0.0)) fail("cap_mb must be > 0");
    if (!shuffle_ && cap_mb_ == ctx.cfg.dist.bucket_cap_mb) fail("cap_mb equals dist.bucket_cap_mb: no change");
    if (ctx.world_size < 2) fail("needs a world size of at least 2 (there is no order to change)");
    if (ctx.cfg.dist.reduce == ReduceMode::deterministic)
      fail("dist.reduce=deterministic has no summation order to change");
  }
  bool log_every_step() const override { return shuffle_; }
  std::string adjust(std::int64_t step, Replica& r) const override {
    r.knobs.own_ring = true;
    r.knobs.ring_bucket_cap_mb = cap_mb_;
    if (!shuffle_) return "ring over buckets of " + std::to_string(cap_mb_) + " MiB";
    // All ranks of this fault draw the same rotation (agreed nonce), so their ring is one ring.
    r.knobs.ring_rotation = static_cast<std::uint32_t>(
        KeyedStream(ctx_.nonce, Stream::fault, static_cast<std::uint32_t>(id()), static_cast<std::uint32_t>(step))
            .below(0, static_cast<std::uint64_t>(ctx_.world_size)));
    return "ring rotation " + std::to_string(r.knobs.ring_rotation);
  }

 private:
  bool shuffle_ = false;
  double cap_mb_ = 1.0;
};

}  // namespace

DIVSIM_REGISTER_FAULT("reduction_order", ReductionOrder);

}  // namespace divsim
