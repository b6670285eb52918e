#pragma once
// Helpers shared by the libFuzzer targets: a scratch file per fuzzing process (the readers under test
// take paths), and a crash that names the broken property. Not a test framework: each target states
// its own properties.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace divsim::fuzz {

// A path of the form <tmp>/divsim-fuzz-<pid>-<name>, overwritten with `size` bytes of `data`.
inline std::string scratch_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("divsim-fuzz-" + std::to_string(::getpid()) + "-" + name)).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// A property the code under test must keep, checked on every input that it accepts.
inline void require(bool ok, const char* property) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", property);
    std::abort();
  }
}

}  // namespace divsim::fuzz
