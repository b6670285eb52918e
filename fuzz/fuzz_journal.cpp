// libFuzzer target: the trajectory journal reader (what divsim-recover reads after a kill, so by
// definition a possibly damaged file). Accepted: any list of groups, each with one payload per process
// and the same process count throughout, never more payload bytes than the file holds; or an IoError.
#include <cstdint>

#include "fuzz_util.hpp"
#include "record/journal.hpp"

using divsim::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = divsim::fuzz::scratch_file("journal", data, size);
  divsim::JournalContents j;
  try {
    j = divsim::read_journal(path);
  } catch (const divsim::IoError&) {
    return 0;
  }
  require(!j.stop.empty(), "reading says why it stopped");
  std::size_t bytes = 0;
  for (const auto& g : j.groups) {
    require(!g.payloads.empty() && g.payloads.size() == j.groups.front().payloads.size(), "groups are complete");
    for (const auto& p : g.payloads) bytes += p.size() + 40;
  }
  require(bytes <= size, "payloads come from the file");
  return 0;
}
