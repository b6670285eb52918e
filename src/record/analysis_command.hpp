#pragma once
// `divsim diagnose ...` and `divsim evaluate ...`: the analysis package (analysis/divsim) run by the
// Python interpreter chosen at configure time (DIVSIM_ANALYSIS_PYTHON, Debian's /usr/bin/python3 with
// h5py, numpy and pandas), so users never depend on which `python3` comes first on their PATH.

namespace divsim {

// True for the subcommands that belong to the analysis package.
bool is_analysis_command(const char* word);

// Replaces this process with `PYTHON -m divsim argv[1..]` (PYTHONPATH gains the package's folder).
// Returns only when that cannot start: the message is printed and the exit code (2) returned.
int analysis_command(int argc, char** argv);

}  // namespace divsim
