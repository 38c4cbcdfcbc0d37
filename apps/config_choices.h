// The valid values of the config's enumerated fields (model.name, dist.ps.schedule, ...), for
// `mintrain help`. They are taken from the validator itself, so the list cannot drift from what
// is checked: each string field, alone, is set to a value no field accepts, and the validator's
// refusal ("...; valid names are: a, b, c") names the choices. Fields that take any text
// (names, paths) draw no such refusal and are left out.
#pragma once
#include <string>
#include <vector>

namespace mt::apps {

struct FieldChoices {
  std::string field;    // "dist.ps.schedule"
  std::string choices;  // "fifo, priority, ..." as the validator lists them
};

// In the schema's order (configs/mintrain.proto).
std::vector<FieldChoices> enumerated_fields();

}  // namespace mt::apps
