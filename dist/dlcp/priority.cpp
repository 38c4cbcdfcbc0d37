#include "dist/dlcp/priority.h"

#include "core/error.h"
#include "dist/dlcp/packet.h"

namespace mt::dist::dlcp {

PriorityDirection priority_direction_from(const std::string& name) {
  if (name == "output_first") return PriorityDirection::OutputFirst;
  if (name == "input_first") return PriorityDirection::InputFirst;
  MT_FAIL("unknown dist.dlcp.priority_direction \"", name, "\"; valid names are: output_first, input_first");
}

uint8_t priority_class(double position, double magnitude_ratio, PriorityDirection direction) {
  const double toward = direction == PriorityDirection::OutputFirst ? position : 1.0 - position;
  const int preferred_half = toward >= 0.5 ? 1 : 0;
  const int large = magnitude_ratio >= 1.0 ? 1 : 0;
  return static_cast<uint8_t>(2 * preferred_half + large);
}

uint8_t dscp_of_class(uint8_t cls) {
  MT_CHECK(cls < kPriorityClasses, "DLCP priority class ", int(cls), " is outside 0..", kPriorityClasses - 1);
  return static_cast<uint8_t>(8 * (cls + 1));  // CS1, CS2, CS3, CS4
}

}  // namespace mt::dist::dlcp
