// The text of a JSON string literal's body: quotes and backslashes escaped, newline and tab as
// \n and \t, other control characters as \u00XX (JSON allows none raw). The one escaper of the files we write as JSON
// (timelines, layer and communication profiles).
#pragma once
#include <cstdio>
#include <string>

namespace mt::core {

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mt::core
