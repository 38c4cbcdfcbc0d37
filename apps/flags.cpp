#include "apps/flags.h"

#include <cmath>
#include <cstdlib>

#include "core/strings.h"

namespace mt::apps {

double parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) throw FlagError(flag + ": \"" + text + "\" is not a number");
  return v;
}

int parse_int(const std::string& flag, const std::string& text, int min) {
  const double v = parse_number(flag, text);
  if (v != std::floor(v) || v < min || v > 1e9)
    throw FlagError(flag + ": \"" + text + "\" must be an integer >= " + std::to_string(min));
  return static_cast<int>(v);
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min, int64_t max,
                                    const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& item : core::split(text, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < min || v > max)
      throw FlagError(flag + ": \"" + item + "\" is not " + what + " (a comma-separated list of integers >= " +
                      std::to_string(min) + ")");
    out.push_back(v);
  }
  if (out.empty()) throw FlagError(flag + ": empty list");
  return out;
}

Flags::Flags(std::string command, std::vector<std::string> args, std::string usage)
    : command_(std::move(command)), usage_(std::move(usage)), args_(std::move(args)) {}

bool Flags::next() {
  if (next_ >= args_.size() || args_[next_] == "--") return false;
  arg_ = args_[next_++];
  has_inline_value_ = false;
  if (const auto eq = arg_.find('='); is_flag() && eq != std::string::npos) {
    inline_value_ = arg_.substr(eq + 1);
    arg_ = arg_.substr(0, eq);
    has_inline_value_ = true;
  }
  return true;
}

std::string Flags::value() {
  if (has_inline_value_) return inline_value_;
  if (next_ >= args_.size()) fail(arg_ + " needs a value");
  return args_[next_++];
}

void Flags::no_value() const {
  if (has_inline_value_) fail(arg_ + " takes no value");
}

void Flags::unknown() const { fail("unknown option \"" + arg_ + "\""); }

void Flags::fail(const std::string& message) const {
  throw FlagError((command_.empty() ? "" : command_ + ": ") + message + (usage_.empty() ? "" : "\n" + usage_));
}

std::vector<std::string> Flags::rest() const {
  if (next_ < args_.size() && args_[next_] == "--") return {args_.begin() + static_cast<std::ptrdiff_t>(next_) + 1, args_.end()};
  return {};
}

}  // namespace mt::apps
