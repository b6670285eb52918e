#pragma once
// The syntax of one fault entry, NAME[:key=value,key=value,...], and the keys every fault shares
// (ranks, start, stop, every, prob). Parsed once at start-up from the `fault` config entries.
//
// It deliberately does not know which faults exist or what their own parameters mean: those stay as
// strings in `params`, and each fault reads and checks them with param_*() when it is built.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace divsim {

// Which ranks a fault acts on: "all" | "N" | "A-B" (inclusive) | items joined by '+', e.g. "0+3-5".
// Held as inclusive runs, not one entry per rank: "0-1048575" is one run, so parsing stays linear in
// the text however wide the ranges are.
struct RankSet {
  struct Run {
    int first;
    int last;  // inclusive
    bool operator==(const Run&) const = default;
  };
  bool all = true;
  std::vector<Run> runs;  // when !all: sorted, disjoint, and no two adjacent (merged)

  bool contains(int rank) const;
  int max_rank() const;      // -1 when all
  std::int64_t count() const;  // ranks named; -1 when all
  std::string text() const;  // canonical text: "all", or runs as N / A-B joined by '+'
};

struct FaultSpec {
  std::string text;  // the spec as given
  std::string name;
  RankSet ranks;            // common key `ranks` (default all)
  std::int64_t start = 0;   // first optimizer step
  std::int64_t stop = -1;   // exclusive; -1 = until the end
  std::int64_t every = 1;   // period in steps, counted from start
  double prob = 1.0;        // per-step probability in (0,1]
  std::map<std::string, std::string> params;  // fault-specific keys, unvalidated here

  // start <= step < stop (or no stop) and (step - start) % every == 0.
  bool in_window(std::int64_t step) const;
  std::string param(const std::string& key, const std::string& fallback) const;
  // Throw ConfigError("fault", ...) naming this spec and the key when the value is not a number.
  double param_double(const std::string& key, double fallback) const;
  std::int64_t param_int(const std::string& key, std::int64_t fallback) const;
};

// Throws ConfigError with key "fault" and a message naming the spec and what is wrong.
FaultSpec parse_fault_spec(const std::string& text);

// Ranks the world does not have are an error, not a silently inactive fault.
void check_fault_ranks(const FaultSpec& f, int world_size);

}  // namespace divsim
