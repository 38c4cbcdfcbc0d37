// Fuzzes the run-config reader (apps/config.h): text-format parsing, `--set` overrides and
// validation. Input: config text, then optionally "\n\x01" followed by override lines. Any
// outcome but a core::Error (a crash, a hang, another exception, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "apps/config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string separator = "\n\x01";
  const size_t split = input.find(separator);
  const std::string text = input.substr(0, split);
  try {
    mt::apps::RunConfig config = mt::apps::parse_config(text, "fuzz.prototxt");
    if (split != std::string::npos) {
      std::istringstream overrides(input.substr(split + separator.size()));
      std::string line;
      while (std::getline(overrides, line)) {
        try {
          mt::apps::apply_override(config, line);
        } catch (const mt::core::Error&) {
        }
      }
    }
    mt::apps::validate_config(config);
    // What is saved into the output folder and checkpoints must parse back.
    (void)mt::apps::parse_config(mt::apps::config_to_text(config), "round-trip");
  } catch (const mt::core::Error&) {
  }
  return 0;
}
