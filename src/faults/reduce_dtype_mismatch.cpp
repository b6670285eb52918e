// reduce_dtype_mismatch: the chosen ranks send their gradient to the allreduce in dtype=bf16 or fp16
// while the others send float32: a gradient-compression hook (DDP's bf16_compress_hook /
// fp16_compress_hook) or a reduce dtype (FSDP's MixedPrecision(reduce_dtype=...), Megatron's bf16
// all-reduce, NVIDIA/Megatron-LM#502) set on some nodes and not on others. The rank's contribution is
// rounded to the dtype as the hook's cast rounds it (round to nearest even; fp16: small elements flush
// to subnormals or zero, large ones overflow to Inf); the sum and everything after stay float32.
// Signature: replicas stay in sync (every rank applies the one reduced gradient), but the run leaves the
// float32 baseline at step 0: the chosen ranks' own gradient (/train/grad_norm_local) differs from the
// baseline by a rounding-sized relative amount, their forward pass does not.
// With dist.reduce=deterministic's fixed-point sum a rank sends several chunk partials: each is rounded.
#include "faults/fault.hpp"
#include "numerics/bits.hpp"

namespace divsim {
namespace {

constexpr std::array<std::string_view, 2> kDtypeNames{"bf16", "fp16"};
constexpr MatmulFormat kDtypes[] = {MatmulFormat::bf16, MatmulFormat::fp16};

class ReduceDtypeMismatch final : public Fault {
 public:
  ReduceDtypeMismatch(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    dtype_ = kDtypes[choice_param("dtype", 0, kDtypeNames)];
    finish_params();
  }
  // Logged when the fault starts acting (adjust's description), not at every step it rounds.
  std::string adjust(std::int64_t, Replica&) const override {
    return "gradient sent to the allreduce in " + std::string(name_of(dtype_));
  }
  std::string corrupt_gradient(std::int64_t, Replica& r, std::size_t) const override {
    round_to_format(std::span<float>(r.grads.data(), r.grads.size()), dtype_);
    return {};
  }

 private:
  MatmulFormat dtype_ = MatmulFormat::bf16;
};

}  // namespace

DIVSIM_REGISTER_FAULT("reduce_dtype_mismatch", ReduceDtypeMismatch);

}  // namespace divsim
