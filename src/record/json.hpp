#pragma once
// JSON text for the output file's descriptive attributes (the model graph, the vocabulary).
#include <cstdio>
#include <string>

namespace divsim {

// A JSON string literal: quotes, backslashes and control characters escaped (a vocabulary holds
// newlines, tabs, backspaces); other UTF-8 bytes pass through as they are.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace divsim
