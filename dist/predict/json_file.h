#pragma once
// Reading the JSON files that `mintrain model` and `mintrain profile-comm` exchange (layer
// times, communication profiles), with nlohmann/json. Every error names the file and the field,
// so a user can fix the file or measure a new one.

#include <string>

#include <nlohmann/json.hpp>

namespace mt::dist {

// The whole file parsed. `what` and `named_by` name it in errors, e.g. "the layer times" and
// "--layer-times": "cannot read <what> \"<path>\" (<named_by>)" when it cannot be opened,
// "<path>: invalid JSON ..." when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& what, const std::string& named_by);

// obj[key] as a finite number >= 0 (or any finite number when fallback < 0). A missing key is
// an error when `required`, otherwise it gives `fallback`. `where` prefixes errors.
double number_field(const nlohmann::json& obj, const std::string& key, const std::string& where, bool required,
                    double fallback = 0.0);

// obj[key] when it is a string, else "".
std::string string_field(const nlohmann::json& obj, const std::string& key);

}  // namespace mt::dist
