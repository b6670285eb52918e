// tf32_mismatch: the chosen ranks run their matmuls on a lower-precision path (seed 000 §4.1: an A100
// on TF32 next to V100s on FP32; "torch.backends.cuda.matmul.allow_tf32" differing between machines).
// Emulation: matmul inputs rounded to format=tf32 (10-bit mantissa, nearest with ties away), bf16 (7) or
// fp16, products accumulated in fp32. Signature: the loss leaves the fp32 baseline at step 0/1 with a
// relative difference ~1e-4..1e-3; the reduced gradient is shared, so replicas stay in sync.
#include "faults/fault.hpp"

namespace divsim {
namespace {

constexpr std::array<std::string_view, 3> kFormatNames{"tf32", "bf16", "fp16"};
constexpr MatmulFormat kFormats[] = {MatmulFormat::tf32, MatmulFormat::bf16, MatmulFormat::fp16};

class Tf32Mismatch final : public Fault {
 public:
  Tf32Mismatch(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    format_ = kFormats[choice_param("format", 0, kFormatNames)];
    finish_params();
  }
  std::string adjust(std::int64_t, Replica& r) const override {
    r.knobs.matmul = format_;
    return "matmul inputs rounded to " + std::string(name_of(format_));
  }

 private:
  MatmulFormat format_ = MatmulFormat::tf32;
};

}  // namespace

DIVSIM_REGISTER_FAULT("tf32_mismatch", Tf32Mismatch);

}  // namespace divsim
