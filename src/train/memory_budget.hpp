#pragma once
// Refuses up front a run whose replicas cannot fit in memory. Linux overcommits: an oversized run
// (model.hidden=65536,65536, or W=256 replicas of a large model in one process) would allocate without
// complaint and die later to the OOM killer (exit 137, no message, perhaps after the file was created).
// The estimate is a lower bound on what the replicas hold (parameters, gradients, optimizer state,
// activations); the budget is this process's share of the node: the smallest of the physical memory and
// the cgroup limit (Slurm confines a job step with one), divided by the processes on the node, and of
// RLIMIT_AS / RLIMIT_DATA.
#include <cstdint>
#include <string>

namespace divsim {

struct MemoryBudget {
  std::uint64_t bytes = 0;  // what one process may use
  std::string source;       // where the limit comes from, for the message
};

MemoryBudget memory_budget(int processes_on_node);

// Throws ConfigError(key, ...) when `needed` bytes (what `what` describes) exceed the budget.
void require_fits(std::uint64_t needed, const MemoryBudget& budget, const std::string& key, const std::string& what);

}  // namespace divsim
