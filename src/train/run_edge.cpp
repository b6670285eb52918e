#include "train/run_edge.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "config/config_error.hpp"
#include "config/options.hpp"
#include "data/dataset.hpp"
#include "divsim_version.hpp"
#include "record/io_error.hpp"
#include "train/termination.hpp"

namespace divsim {

int exit_code_for(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const SetupFailure& f) {
    return f.exit_code();
  } catch (const ConfigError&) {
    return 2;
  } catch (const DataError&) {
    return 2;
  } catch (const IoError&) {
    return 3;
  } catch (const NumericStop&) {
    return 4;
  } catch (const Preempted&) {
    return kExitPreempted;
  } catch (...) {
    return 1;
  }
}

void check_configuration_skew(const RunConfig& cfg, MPI_Comm comm) {
  const std::string mine = std::string("version = ") + kVersion + " " + kGitSha + "\n" + to_ini(cfg);
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the text
  for (const char c : mine) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  if (lo == hi) return;
  // Gather every rank's text on rank 0 and name the keys that differ from rank 0's.
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int p = 0; p < size; ++p) {
    offsets[static_cast<std::size_t>(p)] = total;
    total += lengths[static_cast<std::size_t>(p)];
  }
  std::vector<char> all(static_cast<std::size_t>(rank == 0 ? total : 0));
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm);
  std::string message = "configuration or binary differs between ranks:";
  if (rank == 0) {
    auto keyed = [](const std::string& text) {
      std::map<std::string, std::string> out;
      std::string section;
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        if (line[0] == '[') {
          section = line.substr(1, line.find(']') - 1) + ".";
          continue;
        }
        const auto eq = line.find(" = ");
        if (eq == std::string::npos) continue;
        const std::string key = (line.starts_with("fault") || line.starts_with("version") ? "" : section) + line.substr(0, eq);
        out[key] += (out.count(key) ? "; " : "") + line.substr(eq + 3);
      }
      return out;
    };
    const auto ref = keyed(std::string(all.data(), static_cast<std::size_t>(lengths[0])));
    for (int p = 1; p < size; ++p) {
      const auto other = keyed(std::string(all.data() + offsets[static_cast<std::size_t>(p)], static_cast<std::size_t>(lengths[static_cast<std::size_t>(p)])));
      std::string diffs;
      for (const auto& [key, value] : other) {
        const auto it = ref.find(key);
        if (it == ref.end() || it->second != value)
          diffs += " " + key + "=" + value + " (rank 0: " + (it == ref.end() ? "unset" : it->second) + ");";
      }
      for (const auto& [key, value] : ref)
        if (!other.count(key)) diffs += " " + key + " unset (rank 0: " + value + ");";
      if (!diffs.empty()) message += "\n  rank " + std::to_string(p) + ":" + diffs;
    }
  }
  throw SetupFailure(message, 2, rank == 0);
}

// More processes than CPUs on a node: each collective waits for time slices, and the run is several times
// slower than the same logical ranks folded onto fewer processes (the default run's 4 ranks on 2 cores:
// 72-75 steps/s on 4 processes, 393-451 on 2; docs/user-guide.md). Said, not done: the launcher fixed the
// process count, and a user may be running on processes on purpose (the MPI path is what is being tested).
void note_oversubscription(const RunConfig& cfg, int world, int processes, const NodeShare& share) {
  if (share.processes <= share.cpus) return;
  std::string hint;
  if (processes == share.processes) {  // one node: fold onto the largest divisor of W that fits its CPUs
    int fold = 1;
    for (int p = 1; p <= share.cpus; ++p)
      if (world % p == 0) fold = p;
    hint = "; the same " + std::to_string(world) + " ranks run faster as mpiexec -n " + std::to_string(fold) +
           " ... --dist.world_size=" + std::to_string(world);
    if (cfg.dist.reduce == ReduceMode::mpi) hint += " (bitwise the same with dist.reduce=ring or deterministic)";
  }
  std::fprintf(stderr, "divsim: note: %d processes share %d CPUs on this node and wait for each other's time slices%s\n",
               share.processes, share.cpus, hint.c_str());
}

}  // namespace divsim
