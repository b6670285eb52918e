#pragma once
// The recovery command: rebuilds the trajectory of a killed divsim run from its journal
// ("<out>.journal"), so that a job killed at any moment (even inside an HDF5 flush, which can leave a
// .partial that does not open) still yields a file that notebooks can read. See docs/reliability.md.
//
//   divsim recover RUN [OUT]      (or the standalone build/divsim-recover RUN [OUT])
//     RUN  the run's output path (RUN = run.out, e.g. outputs/x.h5), or its .partial or .journal
//     OUT  where to write the recovered trajectory; default RUN.partial (the .partial is replaced)
//
// It runs as one process (no mpiexec needed; MPI must be initialised) and leaves the journal in place.
// It does not resume the run: `divsim --run.resume=auto` does that, and reads the recovered .partial.
// Exit codes: 0 recovered; 2 usage error or no journal; 3 the journal or the output could not be used.

namespace divsim {

// `name` starts every message ("divsim recover"); argv[1..argc) are the arguments (argv[0] is ignored).
int recover_command(const char* name, int argc, const char* const* argv);

}  // namespace divsim
