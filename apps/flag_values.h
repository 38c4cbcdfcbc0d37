// Numbers given as command-line flag values, checked: an error names the flag and the text.
// Shared by the subcommands and benchmarks that take numeric flags (`mintrain model`, bench_train).
#pragma once
#include <string>

namespace mt::apps {

// A finite number; anything else is an Error: `<flag>: "<text>" is not a number`.
double parse_number(const std::string& flag, const std::string& text);
// An integer in [min, 1e9]; anything else is an Error naming the flag and the bound.
int parse_int(const std::string& flag, const std::string& text, int min);

}  // namespace mt::apps
