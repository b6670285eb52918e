// bitflip: silent data corruption of one element of a rank's gradient before the allreduce (the SDC
// that large-scale training reports describe: a flaky GPU or link flips a bit). bit=B (0..31; 30 flips
// the top exponent bit: a huge value), index=I or random each time. The corrupted value enters the
// reduced gradient of every rank: a spike of the grad norm and the loss at that step; replicas stay in
// sync unless other faults split them.
#include <bit>
#include <cstring>

#include "faults/fault.hpp"
#include "numerics/philox.hpp"

namespace divsim {
namespace {

class Bitflip final : public Fault {
 public:
  Bitflip(const FaultSpec& spec, std::size_t id, const FaultContext& ctx) : Fault(spec, id, ctx) {
    bit_ = integer_param("bit", 30);
    index_ = integer_param("index", -1);
    finish_params();
    default_to_single_step();
    if (bit_ < 0 || bit_ > 31) fail("bit must be in 0..31");
  }
  bool log_every_step() const override { return true; }
  std::string corrupt_gradient(std::int64_t step, Replica& r, std::size_t num_params) const override {
    std::size_t i = static_cast<std::size_t>(index_);
    if (index_ < 0)
      i = KeyedStream(stream_seed(), Stream::fault, static_cast<std::uint32_t>(id()), static_cast<std::uint32_t>(step),
                      static_cast<std::uint32_t>(r.rank) ^ 0xb17f11bu)
              .below(0, num_params);
    if (i >= num_params) fail("index " + std::to_string(i) + " is beyond the " + std::to_string(num_params) + " parameters");
    float& g = r.grads[i];
    const float before = g;
    g = std::bit_cast<float>(std::bit_cast<std::uint32_t>(g) ^ (1u << bit_));
    return "gradient[" + std::to_string(i) + "] bit " + std::to_string(bit_) + ": " + std::to_string(before) + " -> " +
           std::to_string(g);
  }

 private:
  std::int64_t bit_ = 30, index_ = -1;
};

}  // namespace

DIVSIM_REGISTER_FAULT("bitflip", Bitflip);

}  // namespace divsim
