#include "apps/flag_values.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace mt::apps {

double parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  MT_CHECK(!text.empty() && *end == '\0' && std::isfinite(v), flag, ": \"", text, "\" is not a number");
  return v;
}

int parse_int(const std::string& flag, const std::string& text, int min) {
  const double v = parse_number(flag, text);
  MT_CHECK(v == std::floor(v) && v >= min && v <= 1e9, flag, ": \"", text, "\" must be an integer >= ",
           min);
  return static_cast<int>(v);
}

}  // namespace mt::apps
