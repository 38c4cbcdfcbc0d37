// The string helpers that messages, tables and parsers share.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace mt::core {

// "a, b, c", or joined by another separator.
inline std::string join(const std::vector<std::string>& parts, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

// The pieces between the separators, empty ones included: "a,,b" -> {"a", "", "b"}; "" -> {}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  size_t start = 0;
  for (size_t end; (end = s.find(sep, start)) != std::string::npos; start = end + 1)
    parts.push_back(s.substr(start, end - start));
  parts.push_back(s.substr(start));
  return parts;
}

// s without its leading and trailing spaces, tabs and line ends.
inline std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// printf into a string: a number in a chosen format, a line of a table (up to 511 characters).
template <typename... Args>
std::string formatted(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

}  // namespace mt::core
