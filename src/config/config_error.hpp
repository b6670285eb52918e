#pragma once
// The one exception type of configuration and usage errors. Its own header, free of RunConfig, so that
// option_grammar.cpp (the file that talks to Boost) can throw it without seeing any standard container
// whose layout the library's debug mode changes.
#include <stdexcept>
#include <string>

namespace divsim {

// A configuration or usage error; what() = "<key>: <problem>". key() is the `section.key` (or `config`,
// `fault`, or the unknown option as given) so callers and tests can tell which setting was wrong.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string key, const std::string& problem);
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

}  // namespace divsim
