// libFuzzer target: one fault entry, NAME[:key=value,...]. Accepted: a ConfigError, or a spec whose
// canonical rank text parses back to the same ranks, whose window predicate respects start/stop/every,
// and whose rank check against a world of 4 either passes or names the fault.
#include <cstdint>
#include <limits>
#include <string>

#include "config/config_error.hpp"
#include "faults/fault_spec.hpp"
#include "fuzz_util.hpp"

using divsim::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  divsim::FaultSpec f;
  try {
    f = divsim::parse_fault_spec(text);
  } catch (const divsim::ConfigError& e) {
    require(e.key() == "fault", "fault spec errors carry the key 'fault'");
    return 0;
  }
  require(f.every >= 1 && f.start >= 0 && (f.stop < 0 || f.stop > f.start), "window bounds are valid");
  require(f.prob > 0.0 && f.prob <= 1.0, "prob in (0,1]");
  const divsim::FaultSpec again = divsim::parse_fault_spec("x:ranks=" + f.ranks.text());
  require(again.ranks.all == f.ranks.all && again.ranks.runs == f.ranks.runs, "rank text round-trips");
  for (std::size_t i = 0; i < f.ranks.runs.size(); ++i)
    require(f.ranks.runs[i].first <= f.ranks.runs[i].last &&
                (i == 0 || f.ranks.runs[i].first > f.ranks.runs[i - 1].last + 1),
            "rank runs are sorted, disjoint and merged");
  const std::int64_t next = f.start <= std::numeric_limits<std::int64_t>::max() - f.every ? f.start + f.every : f.start;
  for (const std::int64_t step : {f.start - 1, f.start, next, f.stop - 1, f.stop})
    if (f.in_window(step))
      require(step >= f.start && (f.stop < 0 || step < f.stop) && (step - f.start) % f.every == 0,
              "in_window only inside the window");
  require(f.in_window(f.start), "the first step is in the window");
  try {
    divsim::check_fault_ranks(f, 4);
    require(f.ranks.max_rank() < 4, "rank check passes only inside the world");
  } catch (const divsim::ConfigError&) {
    require(f.ranks.max_rank() >= 4, "rank check fails only outside the world");
  }
  return 0;
}
