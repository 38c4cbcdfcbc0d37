// Errors: every failure the user can cause is a thrown mt::core::Error whose message names what
// is wrong and what to do. The CLI catches it, prints it, and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mt::core {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error in what the user asked for (the config, the command line, the output folder) that
// running the same command again cannot fix: `mintrain` exits with kConfigErrorExit for it, and
// `mintrain launch` does not spend its restarts on it.
class ConfigError : public Error {
 public:
  using Error::Error;
};
constexpr int kConfigErrorExit = 3;

// A run asked to stop (a signal) while it waited to start, before there was anything to save:
// `mintrain` exits as for the signal (128 + its number).
class Interrupted : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mt::core

// MT_CHECK(cond, "message parts", value, ...): throw mt::core::Error with the parts joined.
#define MT_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) throw ::mt::core::Error(::mt::core::detail::concat(__VA_ARGS__)); \
  } while (0)

#define MT_FAIL(...) throw ::mt::core::Error(::mt::core::detail::concat(__VA_ARGS__))

// MT_CHECK_CONFIG: the same for what the config or the job's layout must fix (a rerun cannot):
// a ConfigError, exit status 3.
#define MT_CHECK_CONFIG(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond)) throw ::mt::core::ConfigError(::mt::core::detail::concat(__VA_ARGS__)); \
  } while (0)
