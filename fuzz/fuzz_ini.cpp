// libFuzzer target: an INI configuration file (--config=FILE) with arbitrary content. Accepted: a
// ConfigError, or a configuration that passes validate() again (parse_command_line validates; this
// checks that nothing it accepted slips through a second look).
#include <cstdint>
#include <string>

#include "config/options.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string flag = "--config=" + divsim::fuzz::scratch_file("config.ini", data, size);
  const char* argv[] = {"divsim", flag.c_str()};
  try {
    const divsim::CliResult r = divsim::parse_command_line(2, argv);
    divsim::validate(r.config);
  } catch (const divsim::ConfigError&) {
  }
  return 0;
}
