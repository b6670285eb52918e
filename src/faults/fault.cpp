#include "faults/fault.hpp"

#include <algorithm>

#include "config/config_error.hpp"
#include "numerics/philox.hpp"

namespace divsim {

std::map<std::string, FaultFactory>& fault_registry() {
  static std::map<std::string, FaultFactory> registry;
  return registry;
}

Fault::Fault(const FaultSpec& spec, std::size_t id, const FaultContext& ctx)
    : spec_(spec), ctx_(ctx), id_(id), seed_(ctx.cfg.run.seed) {}

bool Fault::active(std::int64_t step, int rank) const {
  if (!spec_.ranks.contains(rank) || !spec_.in_window(step)) return false;
  if (spec_.prob >= 1.0) return true;
  return KeyedStream(seed_, Stream::fault, static_cast<std::uint32_t>(id_), static_cast<std::uint32_t>(step),
                     static_cast<std::uint32_t>(rank))
             .uniform_double(0) < spec_.prob;
}

std::size_t Fault::choice_param(const std::string& key, std::size_t fallback, std::span<const std::string_view> names) {
  consumed_.push_back(key);
  const std::string v = spec_.param(key, std::string(names[fallback]));
  const auto it = std::find(names.begin(), names.end(), v);
  if (it != names.end()) return static_cast<std::size_t>(it - names.begin());
  std::string list;
  for (const std::string_view a : names) list += (list.empty() ? "" : " | ") + std::string(a);
  fail(key + "=" + v + " is not one of " + list);
}

double Fault::number_param(const std::string& key, double fallback) {
  consumed_.push_back(key);
  return spec_.param_double(key, fallback);
}

std::int64_t Fault::integer_param(const std::string& key, std::int64_t fallback) {
  consumed_.push_back(key);
  return spec_.param_int(key, fallback);
}

void Fault::finish_params() {
  for (const auto& [key, value] : spec_.params)
    if (std::find(consumed_.begin(), consumed_.end(), key) == consumed_.end()) {
      std::string known;
      for (const auto& k : consumed_) known += (known.empty() ? "" : ", ") + k;
      fail("unknown key '" + key + "' (" + spec_.name + " takes " + (known.empty() ? "no own keys" : known) +
           ", plus ranks, start, stop, every, prob)");
    }
}

void Fault::fail(const std::string& problem) const { throw ConfigError("fault", "'" + spec_.text + "': " + problem); }

void Fault::default_to_single_step() {
  if (spec_.stop < 0) spec_.stop = spec_.start + 1;
}

}  // namespace divsim
