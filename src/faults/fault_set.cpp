#include "faults/fault_set.hpp"

#include <algorithm>
#include <stdexcept>

#include "config/config_error.hpp"

namespace divsim {

FaultSet::FaultSet(const std::vector<std::string>& specs, const FaultContext& ctx) {
  for (const std::string& text : specs) {
    const FaultSpec spec = parse_fault_spec(text);
    const auto it = fault_registry().find(spec.name);
    if (it == fault_registry().end()) {
      std::string known;
      for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
      throw ConfigError("fault", "'" + text + "': unknown fault '" + spec.name + "' (known: " + known + ")");
    }
    check_fault_ranks(spec, ctx.world_size);
    faults_.push_back(it->second(spec, faults_.size(), ctx));
    last_active_.emplace_back(static_cast<std::size_t>(ctx.world_size), -2);
  }
}

std::vector<std::string> FaultSet::names() {
  std::vector<std::string> out;
  for (const auto& [name, factory] : fault_registry()) out.push_back(name);
  return out;
}

std::vector<FaultRowText> FaultSet::rows() const {
  std::vector<FaultRowText> out;
  for (const auto& f : faults_) {
    const FaultSpec& s = f->spec();
    out.push_back({s.name, s.ranks.text(), s.text, s.start, s.stop, s.every, s.prob});
  }
  return out;
}

bool FaultSet::needs_last_gradient() const {
  return std::any_of(faults_.begin(), faults_.end(), [](const auto& f) { return f->needs_last_gradient(); });
}

void FaultSet::prepare(Replica& r, const EventSink& log) const {
  for (const auto& f : faults_)
    if (f->spec().ranks.contains(r.rank))
      if (const std::string d = f->prepare(r); !d.empty()) log(0, r.rank, f->spec().name, d);
}

void FaultSet::adjust(std::int64_t step, Replica& r, const EventSink& log) {
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = *faults_[i];
    if (!f.active(step, r.rank)) continue;
    const std::string d = f.adjust(step, r);
    auto& last = last_active_[i][static_cast<std::size_t>(r.rank)];
    // Continuous faults are logged when they start acting (or resume after a pause).
    if (!d.empty() && (f.log_every_step() || last != step - 1)) log(step, r.rank, f.spec().name, d);
    last = step;
  }
}

bool FaultSet::plan_samples(const SampleRequest& req, Replica& r) const {
  for (const auto& f : faults_)
    if (f->spec().ranks.contains(r.rank) && f->plan_samples(req, r)) return true;
  return false;
}

void FaultSet::corrupt_gradients(std::int64_t step, Replica& r, std::size_t num_params, const EventSink& log) const {
  for (const auto& f : faults_)
    if (f->active(step, r.rank))
      if (const std::string d = f->corrupt_gradient(step, r, num_params); !d.empty()) log(step, r.rank, f->spec().name, d);
}

}  // namespace divsim

namespace divsim {

std::vector<std::int64_t> FaultSet::rank_state(int rank) const {
  std::vector<std::int64_t> out;
  for (const auto& per_rank : last_active_) out.push_back(per_rank[static_cast<std::size_t>(rank)]);
  return out;
}

void FaultSet::restore_rank_state(int rank, const std::vector<std::int64_t>& state) {
  if (state.size() != last_active_.size()) throw std::invalid_argument("checkpoint fault state does not match the faults");
  for (std::size_t i = 0; i < state.size(); ++i) last_active_[i][static_cast<std::size_t>(rank)] = state[i];
}

}  // namespace divsim
