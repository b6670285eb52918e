// Output-path validation before anything is created (see the header). The in-progress companions of
// the output (<out>.partial, <out>.journal) are checked too: a leftover file of a killed run is replaced,
// but a folder, a device or a pipe in their place would only fail (or block) once the run is under way.
#include "record/output_path.hpp"

#include <unistd.h>

#include <filesystem>

#include "config/config_error.hpp"
#include "record/journal.hpp"

namespace divsim {

namespace {

namespace fs = std::filesystem;

// Whether `p` exists (following links); a regular file or nothing is fine, anything else is refused.
bool check_file_slot(const fs::path& p, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (st.type() == fs::file_type::not_found) return false;
  if (ec) throw ConfigError("run.out", "cannot use " + what + " '" + p.string() + "': " + ec.message());
  if (fs::is_directory(st)) throw ConfigError("run.out", what + " '" + p.string() + "' is a folder, not a file path");
  if (!fs::is_regular_file(st))
    throw ConfigError("run.out", what + " '" + p.string() + "' is not a regular file (a device, pipe or socket)");
  return true;
}

}  // namespace

void check_output_path(const std::string& path, bool overwrite) {
  const fs::path p(path);
  if (check_file_slot(p, "output") && !overwrite)
    throw ConfigError("run.out", "'" + path + "' already exists; set run.overwrite=true to replace it");
  check_file_slot(path + ".partial", "the in-progress file");
  check_file_slot(journal_path(path), "the journal");
  // The nearest existing ancestor must be a writable folder (missing folders are created later).
  std::error_code ec;
  fs::path dir = p.parent_path();
  while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw ConfigError("run.out", "'" + dir.string() + "' in the output path is not a folder");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw ConfigError("run.out", "cannot write to folder '" + dir.string() + "' for '" + path + "'");
}

}  // namespace divsim
