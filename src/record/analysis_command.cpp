#include "record/analysis_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace divsim {

bool is_analysis_command(const char* word) {
  const std::string w = word;
  return w == "diagnose" || w == "evaluate";
}

int analysis_command(int argc, char** argv) {
  const char* python = DIVSIM_ANALYSIS_PYTHON;
  std::string path = DIVSIM_ANALYSIS_DIR;
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') path += std::string(":") + old;
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<char*> args = {const_cast<char*>(python), const_cast<char*>("-m"), const_cast<char*>("divsim")};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(python, args.data());
  std::fprintf(stderr, "divsim: error: %s: cannot start the analysis interpreter %s: %s (it is set when divsim is "
               "configured: -DDIVSIM_ANALYSIS_PYTHON=...; tools/install-deps.sh installs Debian's)\n",
               argv[1], python, std::strerror(errno));
  return 2;
}

}  // namespace divsim
