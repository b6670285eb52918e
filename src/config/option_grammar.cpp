#include "config/option_grammar.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <map>
#include <string>
#include <sstream>
#include <string_view>
#include <vector>

#include "config/config_error.hpp"

namespace divsim {

namespace po = boost::program_options;

struct OptionGrammar::Impl {
  unsigned width, description_width;
  std::vector<po::options_description> groups;

  po::options_description& current() {
    if (groups.empty()) groups.emplace_back(width, description_width);
    return groups.back();
  }
  po::options_description all() const {
    po::options_description out(width, description_width);
    for (const po::options_description& g : groups) out.add(g);
    return out;
  }
};

OptionGrammar::OptionGrammar(unsigned width, unsigned description_width)
    : impl_(std::make_unique<Impl>(Impl{width, description_width, {}})) {}
OptionGrammar::~OptionGrammar() = default;
OptionGrammar::OptionGrammar(OptionGrammar&&) noexcept = default;

void OptionGrammar::group(const std::string& title) {
  impl_->groups.emplace_back(title, impl_->width, impl_->description_width);
}

void OptionGrammar::flag(const std::string& name, const std::string& meaning) {
  impl_->current().add_options()(name.c_str(), meaning.c_str());
}

void OptionGrammar::value(const std::string& name, const std::string& value_name, const std::string& meaning) {
  impl_->current().add_options()(name.c_str(), po::value<std::string>()->value_name(value_name), meaning.c_str());
}

void OptionGrammar::value(const std::string& name, const std::string& value_name, const std::string& meaning,
                          const std::string& default_text) {
  impl_->current().add_options()(
      name.c_str(),
      po::value<std::string>()->value_name(value_name)->default_value(default_text,
                                                                      default_text.empty() ? "\"\"" : default_text),
      meaning.c_str());
}

std::string OptionGrammar::help() const {
  std::ostringstream text;
  text << impl_->all();
  return text.str();
}

namespace {

// Boost's error_with_option_name::what() replaces each placeholder of its message ("%canonical_option%",
// "%value%", ...) with the option's name or token until none is left, so a name that holds a placeholder
// itself never ends (Boost 1.74; fuzz.cli found "--option '%canonical_option%'="). The substitutions
// lose their '%' before what() is asked. Reached through a member pointer taken in a derived class,
// the standard's way to a protected member of an object of the base class.
struct Substitutions : po::error_with_option_name {
  static std::map<std::string, std::string>& of(po::error_with_option_name& e) {
    return e.*(&Substitutions::m_substitutions);
  }
};

std::string message_of(po::error& e) {
  if (auto* named = dynamic_cast<po::error_with_option_name*>(&e))
    for (auto& [placeholder, value] : Substitutions::of(*named)) std::replace(value.begin(), value.end(), '%', '?');
  return e.what();
}

// The sink's own ConfigErrors pass through the callers' catch clauses, which take Boost's errors only.
void emit(const po::parsed_options& parsed, const TokenSink& sink) {
  for (const po::option& o : parsed.options) sink(o.string_key, o.value.empty() ? "" : o.value.front(), !o.unregistered);
}

}  // namespace

void OptionGrammar::tokenize_argv(int argc, const char* const* argv, const TokenSink& sink) const {
  namespace style = po::command_line_style;
  const po::options_description desc = impl_->all();
  // Boost rejects an empty value after '=', but "--model.hidden=" (no hidden layer) and "--run.out=" are
  // meaningful: pass them on as "--key" followed by an empty token.
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    // "--=" has no name: find_nothrow("") would throw (every option matches it); Boost reports it below.
    const bool empty_value = a.starts_with("--") && a.size() > 3 && a.find('=') == a.size() - 1;
    const po::option_description* option =
        empty_value ? desc.find_nothrow(std::string(a.substr(2, a.size() - 3)), false) : nullptr;
    if (option != nullptr && option->semantic()->max_tokens() > 0) {
      args.emplace_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.emplace_back(a);
    }
  }
  try {
    emit(po::command_line_parser(args)
             .options(desc)
             .style(style::allow_long | style::long_allow_adjacent | style::long_allow_next)
             .allow_unregistered()
             .run(),
         sink);
  } catch (po::error_with_option_name& e) {
    std::string key = e.get_option_name();
    key.erase(0, key.find_first_not_of('-'));
    throw ConfigError(key.empty() ? "command line" : key, message_of(e));
  } catch (po::error& e) {
    throw ConfigError("command line", message_of(e));
  }
}

void OptionGrammar::tokenize_ini(const std::string& text, const std::string& path, const TokenSink& sink) const {
  std::istringstream stream(text);
  try {
    emit(po::parse_config_file(stream, impl_->all(), /*allow_unregistered=*/true), sink);
  } catch (po::error& e) {
    throw ConfigError("config", "file '" + path + "': " + message_of(e));
  }
}

}  // namespace divsim
