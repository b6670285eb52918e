#pragma once
// The configuration front end: embedded defaults, then INI files (--config, in order), then the command
// line (--section.key=value), tokenized by Boost.Program_options (option_grammar.hpp) into a validated RunConfig; --help,
// --version and --print-config; and the inverse, to_ini(), which prints the effective configuration so
// that it parses back to the same RunConfig.
//
// It deliberately knows nothing about the world size (train/batch_plan derives per-rank quantities and
// checks them once MPI is up) and nothing about what a fault does (faults/ interprets the specs; only
// their syntax is checked here).
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config_error.hpp"
#include "config/run_config.hpp"

namespace divsim {

enum class CliAction { run, help, version, print_config };

struct CliResult {
  CliAction action = CliAction::run;
  RunConfig config;
  std::string text;  // the help text, the version line, or the INI of --print-config
};

// Parses argv (argv[0] is the program name). --help and --version return at once without reading any
// file; otherwise the layered configuration is built and validate()d. Throws ConfigError.
CliResult parse_command_line(int argc, const char* const* argv);

// World-size independent checks of every key, in section order; throws ConfigError naming the first
// offending key. Also syntax-checks every fault spec.
void validate(const RunConfig& cfg);

// The whole effective configuration as INI: a version comment, the `fault = SPEC` lines, then every key
// of every section in a fixed order. Doubles are printed in their shortest exact form, so the text
// parses back to a bit-identical RunConfig. cfg.quiet is not part of it.
std::string to_ini(const RunConfig& cfg);

// Strict scalar parsers behind every key (and fault parameters). The whole text must be the value;
// surrounding blanks are ignored. Throw ConfigError(key, ...) saying what was expected.
double parse_double(const std::string& key, std::string_view text);          // finite; no nan/inf
std::int64_t parse_int64(const std::string& key, std::string_view text);     // no fractions, no overflow
bool parse_bool(const std::string& key, std::string_view text);              // true/false/1/0/yes/no/on/off

}  // namespace divsim
