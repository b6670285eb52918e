// Parsing of fault entries, NAME[:key=value,...], and the window/rank predicates every fault shares.
// Fault-specific parameters are kept as text; their meaning and ranges belong to each fault's own file.
#include "faults/fault_spec.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

#include "config/options.hpp"

namespace divsim {
namespace {

// Far above any MPI world we run, and small enough that "0-N" cannot make the rank list huge.
constexpr int kMaxRank = (1 << 20) - 1;

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

bool is_identifier(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

ConfigError fault_error(const std::string& spec, const std::string& problem) {
  return ConfigError("fault", "'" + spec + "': " + problem);
}

// The number parsers name only the key; a fault error must also name the spec it came from.
std::int64_t spec_int(const std::string& spec, const std::string& key, const std::string& value) {
  try {
    return parse_int64(key, value);
  } catch (const ConfigError& e) {
    throw fault_error(spec, e.what());
  }
}

double spec_double(const std::string& spec, const std::string& key, const std::string& value) {
  try {
    return parse_double(key, value);
  } catch (const ConfigError& e) {
    throw fault_error(spec, e.what());
  }
}

ConfigError rank_error(const std::string& spec, const std::string& problem) {
  return fault_error(spec, "ranks: " + problem + "; expected all, N, A-B (inclusive) or items joined by +");
}

// One rank number of a rank list item; a leading '-' was rejected before, as a negative rank.
int parse_rank(std::string_view s, std::string_view item, const std::string& spec) {
  int value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec == std::errc::invalid_argument || ptr != s.data() + s.size())
    throw rank_error(spec, "'" + std::string(item) + "' is not a rank or a range");
  if (ec == std::errc::result_out_of_range || value > kMaxRank)
    throw rank_error(spec, "rank " + std::string(s) + " exceeds " + std::to_string(kMaxRank));
  return value;
}

RankSet parse_rank_set(std::string_view text, const std::string& spec) {
  RankSet set;
  if (text == "all") return set;
  set.all = false;
  std::vector<RankSet::Run> items;
  std::string_view rest = text;
  while (true) {
    const auto plus = rest.find('+');
    const std::string_view item = trim(rest.substr(0, plus));
    if (item.empty()) throw rank_error(spec, "empty item in '" + std::string(text) + "'");
    if (item.front() == '-') throw rank_error(spec, "negative rank '" + std::string(item) + "'");
    const auto dash = item.find('-');
    const int first = parse_rank(trim(item.substr(0, dash)), item, spec);
    int last = first;
    if (dash != std::string_view::npos) {
      const std::string_view upper = trim(item.substr(dash + 1));
      if (!upper.empty() && upper.front() == '-')
        throw rank_error(spec, "negative rank in '" + std::string(item) + "'");
      last = parse_rank(upper, item, spec);
      if (last < first) throw rank_error(spec, "range '" + std::string(item) + "' ends before it starts");
    }
    items.push_back({first, last});
    if (plus == std::string_view::npos) break;
    rest = rest.substr(plus + 1);
  }
  std::sort(items.begin(), items.end(), [](const RankSet::Run& a, const RankSet::Run& b) { return a.first < b.first; });
  for (const RankSet::Run& item : items) {
    if (!set.runs.empty() && item.first <= set.runs.back().last + 1)
      set.runs.back().last = std::max(set.runs.back().last, item.last);
    else
      set.runs.push_back(item);
  }
  return set;
}

}  // namespace

bool RankSet::contains(int rank) const {
  if (all) return true;
  // The first run that ends at or after `rank` is the only one that can hold it.
  const auto it = std::lower_bound(runs.begin(), runs.end(), rank, [](const Run& r, int v) { return r.last < v; });
  return it != runs.end() && it->first <= rank;
}

int RankSet::max_rank() const { return all || runs.empty() ? -1 : runs.back().last; }

std::int64_t RankSet::count() const {
  if (all) return -1;
  std::int64_t n = 0;
  for (const Run& r : runs) n += std::int64_t{r.last} - r.first + 1;
  return n;
}

std::string RankSet::text() const {
  if (all) return "all";
  std::string out;
  for (const Run& r : runs) {
    if (!out.empty()) out += '+';
    out += std::to_string(r.first);
    if (r.last > r.first) out += '-' + std::to_string(r.last);
  }
  return out;
}

bool FaultSpec::in_window(std::int64_t step) const {
  return step >= start && (stop < 0 || step < stop) && (step - start) % every == 0;
}

std::string FaultSpec::param(const std::string& key, const std::string& fallback) const {
  const auto it = params.find(key);
  return it == params.end() ? fallback : it->second;
}

double FaultSpec::param_double(const std::string& key, double fallback) const {
  const auto it = params.find(key);
  return it == params.end() ? fallback : spec_double(text, key, it->second);
}

std::int64_t FaultSpec::param_int(const std::string& key, std::int64_t fallback) const {
  const auto it = params.find(key);
  return it == params.end() ? fallback : spec_int(text, key, it->second);
}

FaultSpec parse_fault_spec(const std::string& text) {
  FaultSpec f;
  f.text = text;
  const std::string_view all(text);
  const auto colon = all.find(':');
  f.name = std::string(trim(all.substr(0, colon)));
  if (f.name.empty()) throw fault_error(text, "empty fault name; expected NAME[:key=value,...]");
  if (!is_identifier(f.name))
    throw fault_error(text, "fault name '" + f.name + "' may contain only a-z, 0-9 and _");

  bool stop_given = false;
  if (colon != std::string_view::npos) {
    std::set<std::string, std::less<>> seen;
    std::string_view rest = all.substr(colon + 1);
    while (true) {
      const auto comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma));
      const auto eq = item.find('=');
      const std::string key(trim(item.substr(0, eq)));
      const std::string value(eq == std::string_view::npos ? "" : trim(item.substr(eq + 1)));
      if (eq == std::string_view::npos || !is_identifier(key) || value.empty())
        throw fault_error(text, "malformed entry '" + std::string(item) +
                                    "'; expected key=value with a key of a-z, 0-9, _ and a non-empty value");
      if (!seen.insert(key).second) throw fault_error(text, "key '" + key + "' given twice");
      if (key == "ranks") {
        f.ranks = parse_rank_set(value, text);
      } else if (key == "start") {
        f.start = spec_int(text, key, value);
      } else if (key == "stop") {
        f.stop = spec_int(text, key, value);
        stop_given = true;
      } else if (key == "every") {
        f.every = spec_int(text, key, value);
      } else if (key == "prob") {
        f.prob = spec_double(text, key, value);
        if (!(f.prob > 0.0 && f.prob <= 1.0)) throw fault_error(text, "prob must be in (0,1], got " + value);
      } else {
        f.params.emplace(key, value);
      }
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }

  if (f.start < 0) throw fault_error(text, "start must be >= 0, got " + std::to_string(f.start));
  if (stop_given && f.stop <= f.start)
    throw fault_error(text, "stop (exclusive) must be > start (" + std::to_string(f.start) + "), got " +
                                std::to_string(f.stop));
  if (f.every < 1) throw fault_error(text, "every must be >= 1, got " + std::to_string(f.every));
  return f;
}

void check_fault_ranks(const FaultSpec& f, int world_size) {
  if (f.ranks.max_rank() >= world_size)
    throw fault_error(f.text, "ranks=" + f.ranks.text() + " names rank " + std::to_string(f.ranks.max_rank()) +
                                  " but the world has " + std::to_string(world_size) +
                                  (world_size == 1 ? " rank (0)" : " ranks (0.." + std::to_string(world_size - 1) + ")"));
}

}  // namespace divsim
