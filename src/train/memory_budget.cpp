#include "train/memory_budget.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "config/config_error.hpp"

namespace divsim {

namespace {

constexpr std::uint64_t kUnlimited = ~std::uint64_t{0};

// The memory limit of this process's cgroup (v2 memory.max, or v1 memory.limit_in_bytes), if any.
std::uint64_t cgroup_limit() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    const auto colon = line.find(':'), second = line.find(':', colon + 1);
    if (colon == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(colon + 1, second - colon - 1), path = line.substr(second + 1);
    std::string file;
    if (controllers.empty()) file = "/sys/fs/cgroup" + path + "/memory.max";
    else if (controllers == "memory") file = "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
    else continue;
    std::ifstream in(file);
    std::uint64_t value = 0;
    if (in >> value) return value;  // "max" (v2, no limit) fails to parse and means none
  }
  return kUnlimited;
}

std::uint64_t soft_limit(int resource) {
  struct rlimit r{};
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kUnlimited;
  return r.rlim_cur;
}

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
  return text;
}

}  // namespace

MemoryBudget memory_budget(int processes_on_node) {
  const auto pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const std::uint64_t physical = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : kUnlimited;
  const std::uint64_t share = processes_on_node > 1 ? static_cast<std::uint64_t>(processes_on_node) : 1;
  const std::string per = processes_on_node > 1 ? " shared by " + std::to_string(processes_on_node) + " processes" : "";
  MemoryBudget b{physical / share, "the node's " + gib(physical) + per};
  if (const std::uint64_t c = cgroup_limit(); c / share < b.bytes) b = {c / share, "the cgroup limit of " + gib(c) + per};
  if (const std::uint64_t as = soft_limit(RLIMIT_AS); as < b.bytes) b = {as, "RLIMIT_AS (ulimit -v) of " + gib(as)};
  if (const std::uint64_t data = soft_limit(RLIMIT_DATA); data < b.bytes) b = {data, "RLIMIT_DATA (ulimit -d) of " + gib(data)};
  return b;
}

void require_fits(std::uint64_t needed, const MemoryBudget& budget, const std::string& key, const std::string& what) {
  if (needed <= budget.bytes) return;
  throw ConfigError(key, what + " would take at least " + gib(needed) + " per process, more than the " + gib(budget.bytes) +
                             " it can have (" + budget.source + ")");
}

}  // namespace divsim
