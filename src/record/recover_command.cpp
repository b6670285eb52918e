#include "record/recover_command.hpp"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "record/journal.hpp"
#include "record/trajectory_writer.hpp"

namespace divsim {
namespace {

std::string strip_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.ends_with(suffix) ? s.substr(0, s.size() - suffix.size()) : s;
}

}  // namespace

int recover_command(const char* name, int argc, const char* const* argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s RUN [OUT]\n"
                         "  RUN  the run's output path (run.out), or its .partial or .journal\n"
                         "  OUT  output trajectory; default RUN.partial (replaced)\n", name);
    return 2;
  }
  const std::string run_path = strip_suffix(strip_suffix(argv[1], ".journal"), ".partial");
  const std::string journal = journal_path(run_path);
  const std::string out = argc == 3 ? argv[2] : run_path + ".partial";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(journal, ec)) {
    std::fprintf(stderr, "%s: error: no journal '%s' (a finished run deletes its journal)\n", name, journal.c_str());
    return 2;
  }
  try {
    const auto r = TrajectoryWriter::recover(journal, out);
    // The rebuilt file is an unfinished run, and its name says so: say where it is and what opens it.
    const bool beside = out == run_path + ".partial";
    std::printf("%s: wrote %s: the first %lld steps of an unfinished run, from %zu complete flushes (journal: %s); "
                "its root attribute 'recovered' says so\n  read it with: divsim diagnose %s%s; the journal %s is "
                "left in place\n",
                name, out.c_str(), static_cast<long long>(r.steps), r.flushes, r.stop.c_str(),
                beside ? run_path.c_str() : out.c_str(), beside ? (" (which opens " + out + ")").c_str() : "",
                journal.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 3;
  }
}

}  // namespace divsim
