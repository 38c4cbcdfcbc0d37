#include "dist/predict/json_file.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mt::dist {

nlohmann::json read_json_file(const std::string& path, const std::string& what, const std::string& named_by) {
  std::ifstream in(path);
  MT_CHECK(in.good(), "cannot read ", what, " \"", path, "\" (", named_by, ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    MT_FAIL(path, ": invalid JSON at byte ", e.byte, " (", e.what(), ")");
  }
}

double number_field(const nlohmann::json& obj, const std::string& key, const std::string& where, bool required,
                    double fallback) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    MT_CHECK(!required, where, ": missing \"", key, "\"");
    return fallback;
  }
  MT_CHECK(it->is_number(), where, ": \"", key, "\" must be a number");
  const double v = it->get<double>();
  MT_CHECK(std::isfinite(v) && (v >= 0 || fallback < 0), where, ": \"", key, "\" must be a finite number >= 0, got ",
           v);
  return v;
}

std::string string_field(const nlohmann::json& obj, const std::string& key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace mt::dist
