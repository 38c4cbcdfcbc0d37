// Which packets matter most (DLCP's packet-level priority): a class per packet from the position
// of its layer and the size of its gradients, written into the IP header's DSCP field so a switch
// can queue and drop by it. Four classes, 3 the most important:
//
//   class = 2 * (layer in the preferred half of the model) + (packet's mean |g| >= model's mean |g|)
//
// "Preferred" is nearer the output (output_first: those gradients are ready first in backward and
// the next forward needs the first layers last) or nearer the input (input_first: the next
// forward needs them first). Large gradients change the model most, so they outrank small ones
// of the same half. The sender sends higher classes first; a switch with priority bands drops
// class 0 first.
#pragma once
#include <cstdint>
#include <string>

namespace mt::dist::dlcp {

enum class PriorityDirection { OutputFirst, InputFirst };
PriorityDirection priority_direction_from(const std::string& name);  // "output_first" | "input_first"

// position: the layer's place in [0, 1], 0 = the input layer, 1 = the output layer.
// magnitude_ratio: the packet's mean |g| over the whole buffer's mean |g| (0 when all are 0).
uint8_t priority_class(double position, double magnitude_ratio, PriorityDirection direction);

// DSCP code points of the classes: CS1 (lower effort) for class 0, then CS2, CS3, CS4.
uint8_t dscp_of_class(uint8_t cls);
// The IPv4 TOS byte (DSCP in its upper six bits) that IP_TOS sets.
inline uint8_t tos_of_class(uint8_t cls) { return static_cast<uint8_t>(dscp_of_class(cls) << 2); }

}  // namespace mt::dist::dlcp
