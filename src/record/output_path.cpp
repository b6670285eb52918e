#include "record/output_path.hpp"

#include <unistd.h>

#include <filesystem>

#include "config/options.hpp"

namespace divsim {

void check_output_path(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) throw ConfigError("run.out", "'" + path + "' is a folder, not a file path");
  if (fs::exists(p, ec) && !overwrite)
    throw ConfigError("run.out", "'" + path + "' already exists; set run.overwrite=true to replace it");
  // The nearest existing ancestor must be a writable folder (missing folders are created later).
  fs::path dir = p.parent_path();
  while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw ConfigError("run.out", "'" + dir.string() + "' in the output path is not a folder");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw ConfigError("run.out", "cannot write to folder '" + dir.string() + "' for '" + path + "'");
}

}  // namespace divsim
