#pragma once
// Checks on the output path that belong to input validation (exit 2, nothing written): an existing file
// without run.overwrite, a folder, device or pipe where the output (or its .partial or .journal) would
// go, and a location this process cannot write to. It creates nothing; the writer creates the folders.
#include <string>

namespace divsim {

void check_output_path(const std::string& path, bool overwrite);  // throws ConfigError("run.out", ...)

}  // namespace divsim
