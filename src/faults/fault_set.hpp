#pragma once
// All faults of a run, and the calls the step loop makes at each hook point. Events go to a sink
// (the trajectory writer's /events) as (step, rank, kind = fault name, detail).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "faults/fault.hpp"

namespace divsim {

using EventSink = std::function<void(std::int64_t step, int rank, const std::string& kind, const std::string& detail)>;

struct FaultRowText {  // one configured fault, for the /faults table
  std::string name, ranks, spec;
  std::int64_t start = 0, stop = -1, every = 1;
  double prob = 1.0;
};

class FaultSet {
 public:
  // Parses and validates every spec (ConfigError naming the fault: unknown name or key, rank >= W,
  // contradictions with the configuration).
  FaultSet(const std::vector<std::string>& specs, const FaultContext& ctx);

  bool empty() const { return faults_.empty(); }
  std::vector<FaultRowText> rows() const;
  bool needs_last_gradient() const;  // some fault applies a rank's last reduced gradient (Replica::last_grad)
  static std::vector<std::string> names();  // every registered fault

  void prepare(Replica& r, const EventSink& log) const;
  void adjust(std::int64_t step, Replica& r, const EventSink& log);
  bool plan_samples(const SampleRequest& req, Replica& r) const;
  void corrupt_gradients(std::int64_t step, Replica& r, std::size_t num_params, const EventSink& log) const;

  // Bookkeeping of one rank (when each fault last acted on it), for checkpoints.
  std::vector<std::int64_t> rank_state(int rank) const;
  void restore_rank_state(int rank, const std::vector<std::int64_t>& state);

 private:
  std::vector<std::unique_ptr<Fault>> faults_;
  std::vector<std::vector<std::int64_t>> last_active_;  // per fault, per rank: last step it acted (-2 = never)
};

}  // namespace divsim
