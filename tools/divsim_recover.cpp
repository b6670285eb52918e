// divsim-recover: rebuilds the trajectory of a killed divsim run from its journal ("<out>.journal"), so
// that a job killed at any moment (even inside an HDF5 flush, which can leave a .partial that does not
// open) still yields a file that notebooks can read. See docs/reliability.md.
//
//   divsim-recover RUN [OUT]
//     RUN  the run's output path (RUN = run.out, e.g. outputs/x.h5), or its .partial or .journal
//     OUT  where to write the recovered trajectory; default RUN.partial (the .partial is replaced)
//
// It runs as one process (no mpiexec needed) and leaves the journal in place. It does not resume the
// run: `divsim --run.resume=true` does that, and reads the recovered .partial.
// Exit codes: 0 recovered; 2 usage error or no journal; 3 the journal or the output could not be used.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "record/journal.hpp"
#include "record/trajectory_writer.hpp"

namespace {

std::string strip_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.ends_with(suffix) ? s.substr(0, s.size() - suffix.size()) : s;
}

int run(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: divsim-recover RUN [OUT]\n"
                         "  RUN  the run's output path (run.out), or its .partial or .journal\n"
                         "  OUT  output trajectory; default RUN.partial (replaced)\n");
    return 2;
  }
  const std::string run_path = strip_suffix(strip_suffix(argv[1], ".journal"), ".partial");
  const std::string journal = divsim::journal_path(run_path);
  const std::string out = argc == 3 ? argv[2] : run_path + ".partial";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(journal, ec)) {
    std::fprintf(stderr, "divsim-recover: error: no journal '%s' (a finished run deletes its journal)\n",
                 journal.c_str());
    return 2;
  }
  try {
    const auto r = divsim::TrajectoryWriter::recover(journal, out);
    std::printf("divsim-recover: wrote %s: %lld steps from %zu complete flushes (journal: %s)\n", out.c_str(),
                static_cast<long long>(r.steps), r.flushes, r.stop.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "divsim-recover: error: %s\n", e.what());
    return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = run(argc, argv);
  MPI_Finalize();
  return code;
}
