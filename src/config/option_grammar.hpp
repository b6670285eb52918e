#pragma once
// The options divsim accepts, as Boost.Program_options sees them: it tokenizes the command line and INI
// files and formats --help; options.cpp does everything else (layering, typed parsing, every message).
//
// This is the only file that includes Boost. Boost's compiled library was built without the standard
// library's debug mode, and its types (variables_map is a std::map, parsed_options holds a std::vector)
// change layout under _GLIBCXX_DEBUG; so the interface below carries only std::string, std::function and
// an opaque pointer, whose layout debug mode leaves alone, and this file alone is compiled without it in
// the checked build (DIVSIM_STDLIB_DEBUG), while the rest of divsim runs with every iterator checked.
#include <functional>
#include <memory>
#include <string>

namespace divsim {

// One token, in the order given: the option's name (without "--"), its value ("" for a flag), and whether
// the grammar knows the name. A bare argument on the command line comes with an empty key.
using TokenSink = std::function<void(const std::string& key, const std::string& value, bool known)>;

class OptionGrammar {
 public:
  // Widths of the --help text; Boost's own defaults when only tokenizing.
  explicit OptionGrammar(unsigned width = 80, unsigned description_width = 40);
  ~OptionGrammar();
  OptionGrammar(const OptionGrammar&) = delete;
  OptionGrammar& operator=(const OptionGrammar&) = delete;
  OptionGrammar(OptionGrammar&&) noexcept;

  void group(const std::string& title);  // later options are listed under this --help heading
  void flag(const std::string& name, const std::string& meaning);
  void value(const std::string& name, const std::string& value_name, const std::string& meaning);
  // An option listed with its default ("" is shown as "").
  void value(const std::string& name, const std::string& value_name, const std::string& meaning,
             const std::string& default_text);

  std::string help() const;
  // Long options only, no prefix guessing (--optim.l must not silently mean --optim.lr); unknown names
  // are passed on as such. Boost's own syntax errors become ConfigError.
  void tokenize_argv(int argc, const char* const* argv, const TokenSink& sink) const;
  // key = value lines of INI `text` (from file `path`, for messages), "section.key" for those in a section.
  void tokenize_ini(const std::string& text, const std::string& path, const TokenSink& sink) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace divsim
