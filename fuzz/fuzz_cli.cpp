// libFuzzer target: the command line. The input is split at newlines into argv (argv[0] = "divsim") and
// given to parse_command_line. Accepted: a ConfigError (bad input) or a configuration; for the latter
// --print-config's INI must parse back to the same configuration (to_ini is a fixed point), as the
// issue's "--print-config round-trips" demands. Anything else (another exception, a crash, a sanitizer
// report, a hang) is a bug.
#include <cstdint>
#include <string>
#include <vector>

#include "config/options.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args{"divsim"};
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t nl = text.find('\n', start);
    args.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  // Reading files the input names is not what this target is about (--config has its own target).
  for (const std::string& a : args)
    if (a.starts_with("--config")) return 0;
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  divsim::CliResult r;
  try {
    r = divsim::parse_command_line(static_cast<int>(argv.size()), argv.data());
  } catch (const divsim::ConfigError&) {
    return 0;
  }
  if (r.action != divsim::CliAction::run && r.action != divsim::CliAction::print_config) return 0;
  const std::string ini = divsim::to_ini(r.config);
  const std::string path = divsim::fuzz::scratch_file("cli.ini", reinterpret_cast<const std::uint8_t*>(ini.data()),
                                                      ini.size());
  const std::string flag = "--config=" + path;
  const char* again[] = {"divsim", flag.c_str()};
  divsim::CliResult back;
  try {
    back = divsim::parse_command_line(2, again);
  } catch (const divsim::ConfigError& e) {
    std::fprintf(stderr, "accepted configuration does not parse back: %s\n--- INI ---\n%s", e.what(), ini.c_str());
    divsim::fuzz::require(false, "the printed configuration parses");
  }
  divsim::fuzz::require(divsim::to_ini(back.config) == ini, "to_ini(parse(to_ini(c))) == to_ini(c)");
  return 0;
}
