// The one command-line flag parser: every subcommand (train, eval, launch, model, profile-comm)
// and benchmark walks its arguments with it. A flag is "--name value" or "--name=value", a
// switch "--name"; anything else is positional, and "--" ends the flags (launch's worker command
// follows it). Errors are FlagErrors naming the command and the flag: a missing value, an
// unknown option, a value that is not a number; `mintrain` exits 2 for them and prints its usage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace mt::apps {

struct FlagError : core::Error {
  using core::Error::Error;
};

// A finite number; anything else is a FlagError: `<flag>: "<text>" is not a number`.
double parse_number(const std::string& flag, const std::string& text);
// An integer in [min, 1e9]; anything else is a FlagError naming the flag and the bound.
int parse_int(const std::string& flag, const std::string& text, int min);
// A comma-separated list of integers in [min, max] ("1,2,4"); anything else is a FlagError
// naming the flag, the item and what one should be (`what`, e.g. "a worker count").
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min, int64_t max,
                                    const std::string& what);

class Flags {
 public:
  // `command` prefixes every error ("model: --at needs a value"); `usage`, if any, follows it.
  Flags(std::string command, std::vector<std::string> args, std::string usage = "");

  // Moves to the next argument; false after the last one, or at "--" (rest() then holds what
  // follows it).
  bool next();
  const std::string& arg() const { return arg_; }  // a flag's name, without any "=value"
  bool is(const std::string& name) const { return arg_ == name; }
  bool is_flag() const { return arg_.rfind("--", 0) == 0; }
  std::string value();  // the flag's value: after "=", or the next argument
  double number() { return parse_number(arg_, value()); }
  int integer(int min) { return parse_int(arg_, value(), min); }
  void no_value() const;  // a switch: "--name=x" is an error
  [[noreturn]] void unknown() const;
  [[noreturn]] void fail(const std::string& message) const;  // "<command>: <message>" (+ usage)
  std::vector<std::string> rest() const;

 private:
  std::string command_, usage_;
  std::vector<std::string> args_;
  size_t next_ = 0;  // index of the argument after the current one
  std::string arg_;
  std::string inline_value_;  // from "--name=value"
  bool has_inline_value_ = false;
};

}  // namespace mt::apps
