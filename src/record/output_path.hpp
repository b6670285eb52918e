#pragma once
// Checks on the output path that belong to input validation (exit 2, nothing written): an existing file
// without run.overwrite, a path that is a folder, and a location this process cannot write to.
#include <string>

namespace divsim {

void check_output_path(const std::string& path, bool overwrite);  // throws ConfigError("run.out", ...)

}  // namespace divsim
