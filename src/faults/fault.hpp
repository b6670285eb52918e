#pragma once
// A fault: one real-world bug of data-parallel training, injected on chosen ranks and steps.
//
// Faults are plug-ins in the manner of LAMMPS styles: each is one class in its own file, registered by
// name (DIVSIM_REGISTER_FAULT), overriding only the hooks it needs. The step loop calls the hooks through
// FaultSet and never names a fault. A fault acts on a rank only through that rank's Replica: the per-step
// RankKnobs (precision, loss, seeds, clipping, schedule, participation, buffer sync, overflow policy,
// extra updates, ring order), its samples, its gradient and its optimizer state.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"
#include "data/sampler.hpp"
#include "faults/fault_spec.hpp"
#include "train/replica.hpp"

namespace divsim {

struct FaultContext {
  const RunConfig& cfg;
  int world_size = 1;
  std::int64_t total_steps = 0;
  std::uint64_t nonce = 0;  // clock-derived, agreed by all processes: for faults that make reruns differ
  // What the model has, for faults whose mechanism needs a kind of layer.
  bool model_has_batchnorm = false;
  bool model_has_dropout = false;
};

// Where a rank's micro-batch comes from, for faults that replace it.
struct SampleRequest {
  const Sampler& shared;  // the run's sampler
  std::int64_t step = 0, epoch = 0, step_in_epoch = 0;
  int micro = 0;
};

class Fault {
 public:
  Fault(const FaultSpec& spec, std::size_t id, const FaultContext& ctx);
  virtual ~Fault() = default;

  const FaultSpec& spec() const { return spec_; }
  // Acting on `rank` at `step`: rank in the set, step in the window, and the per-step probability drawn
  // from the keyed fault stream (fault id, step, rank), so it is reproducible.
  bool active(std::int64_t step, int rank) const;
  // Faults whose every action is an event (a flipped bit, a skipped allreduce) say so; the others are
  // logged when they start acting on a rank.
  virtual bool log_every_step() const { return false; }
  // Faults that make a rank apply the last reduced gradient instead of this step's keep a copy of it.
  virtual bool needs_last_gradient() const { return false; }

  // Hooks; each returns the /events detail of what it did ("" = nothing to log).
  virtual std::string prepare(Replica&) const { return {}; }                 // set-up (init seed, broadcast)
  virtual std::string adjust(std::int64_t /*step*/, Replica&) const { return {}; }  // knobs, before the step
  // Replace the rank's micro-batch (fill r.samples); return true if this fault did.
  virtual bool plan_samples(const SampleRequest&, Replica&) const { return false; }
  virtual std::string corrupt_gradient(std::int64_t /*step*/, Replica&, std::size_t /*num_params*/) const { return {}; }

 protected:
  // Fault-specific parameters: readers that remember which keys were consumed, so unknown keys are
  // errors (call finish_params() at the end of the constructor).
  // A parameter that takes one of `names`: its index there (`fallback` when absent); fails naming the key
  // and the choices otherwise. A fault keeps it as an enum whose values follow the order of `names`, so
  // nothing past this parser compares the text.
  std::size_t choice_param(const std::string& key, std::size_t fallback, std::span<const std::string_view> names);
  template <class E, std::size_t N>
  E choice_param(const std::string& key, E fallback, const std::array<std::string_view, N>& names) {
    return static_cast<E>(choice_param(key, static_cast<std::size_t>(fallback), std::span<const std::string_view>(names)));
  }
  double number_param(const std::string& key, double fallback);
  std::int64_t integer_param(const std::string& key, std::int64_t fallback);
  void finish_params();
  [[noreturn]] void fail(const std::string& problem) const;  // ConfigError("fault", "<spec>: problem")
  // One-shot faults ("at start ...") act at `start` only unless the spec gives a stop.
  void default_to_single_step();
  std::uint64_t stream_seed() const { return seed_; }
  std::size_t id() const { return id_; }

  FaultSpec spec_;
  const FaultContext ctx_;

 private:
  std::size_t id_;
  std::uint64_t seed_;
  std::vector<std::string> consumed_;
};

using FaultFactory = std::function<std::unique_ptr<Fault>(const FaultSpec&, std::size_t, const FaultContext&)>;
std::map<std::string, FaultFactory>& fault_registry();

struct FaultRegistrar {
  FaultRegistrar(const char* name, FaultFactory factory) { fault_registry()[name] = std::move(factory); }
};

#define DIVSIM_REGISTER_FAULT(NAME, CLASS)                                                              \
  static const ::divsim::FaultRegistrar registrar_##CLASS(                                              \
      NAME, [](const ::divsim::FaultSpec& s, std::size_t id, const ::divsim::FaultContext& c) {          \
        return std::unique_ptr<::divsim::Fault>(std::make_unique<CLASS>(s, id, c));                      \
      })

}  // namespace divsim
