// The class and layer of every packet a sender cuts from a gradient buffer (DLCP's priorities,
// priority.h), from where each layer's gradients sit in the buffer. The ring's buffer is the
// whole flattened gradient, one segment per parameter; a parameter-server push is the slices
// of the parameters that one server holds, one segment per slice, each of its parameter's layer.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/dlcp/priority.h"
#include "dist/dlcp/transport.h"

namespace mt::dist::dlcp {

struct GradientLayout {
  // Segment k covers [segment_end[k - 1], segment_end[k]) of the buffer (increasing ends) and
  // holds gradients of layer segment_layer[k]; layer 0 is nearest the input.
  std::vector<int64_t> segment_end;
  std::vector<uint16_t> segment_layer;
  int layers = 0;  // in the model: a layer's position is layer / (layers - 1)
  PriorityDirection direction = PriorityDirection::OutputFirst;

  // The flattened gradient of parameters of these sizes: one segment (and layer) per parameter.
  static GradientLayout of_parameters(const std::vector<int64_t>& numel, PriorityDirection direction);
  // Adds a segment of `numel` elements of `layer` at the buffer's end.
  void append(int64_t numel, uint16_t layer);
  // The layer of the buffer's element `at`.
  uint16_t layer_at(int64_t at) const;
};

// Fills out->contributors, priority and layer for the packets of [begin, begin + n) of
// `values` (cut from `begin`, per_packet values each): contributors from counts[first value],
// the class from the layer's position and the packet's mean |value| per contributor against
// `mean_abs`. A null layout leaves every packet class 0, layer 0.
void classify_packets(const GradientLayout* layout, const float* values, const uint16_t* counts, uint32_t begin,
                      uint32_t n, uint16_t per_packet, double mean_abs, OutgoingTransfer* out);

// The mean |value| of a buffer (the magnitude that classes are relative to).
double mean_abs(const float* values, uint32_t n);

}  // namespace mt::dist::dlcp
