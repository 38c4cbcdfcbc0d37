#include "dist/dlcp/packet_classes.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mt::dist::dlcp {

GradientLayout GradientLayout::of_parameters(const std::vector<int64_t>& numel, PriorityDirection direction) {
  GradientLayout layout;
  layout.direction = direction;
  for (size_t p = 0; p < numel.size(); ++p) layout.append(numel[p], static_cast<uint16_t>(std::min<size_t>(p, 65535)));
  layout.layers = static_cast<int>(numel.size());
  return layout;
}

void GradientLayout::append(int64_t numel, uint16_t layer) {
  segment_end.push_back((segment_end.empty() ? 0 : segment_end.back()) + numel);
  segment_layer.push_back(layer);
}

uint16_t GradientLayout::layer_at(int64_t at) const {
  MT_CHECK(!segment_end.empty(), "DLCP: a gradient layout without segments");
  const auto it = std::upper_bound(segment_end.begin(), segment_end.end(), at);
  const size_t k = std::min<size_t>(static_cast<size_t>(it - segment_end.begin()), segment_end.size() - 1);
  return segment_layer[k];
}

double mean_abs(const float* values, uint32_t n) {
  double sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += std::fabs(values[i]);
  return n ? sum / n : 0.0;
}

void classify_packets(const GradientLayout* layout, const float* values, const uint16_t* counts, uint32_t begin,
                      uint32_t n, uint16_t per_packet, double buffer_mean_abs, OutgoingTransfer* out) {
  const TransferShape shape{n, per_packet};
  out->contributors.assign(shape.packets(), 1);
  out->priority.assign(shape.packets(), 0);
  out->layer.assign(shape.packets(), 0);
  const bool classed = layout && !layout->segment_end.empty();
  for (uint32_t p = 0; p < shape.packets(); ++p) {
    const uint32_t at = begin + shape.offset_of(p), count = shape.count_of(p);
    const uint16_t contributors = counts[at];
    out->contributors[p] = contributors;
    if (!classed) continue;
    const uint16_t layer = layout->layer_at(at);
    const double mean = mean_abs(values + at, count) / std::max<uint16_t>(contributors, 1);
    const double position = layout->layers > 1 ? double(layer) / double(layout->layers - 1) : 1.0;
    out->layer[p] = layer;
    out->priority[p] =
        priority_class(position, buffer_mean_abs > 0 ? mean / buffer_mean_abs : 0.0, layout->direction);
  }
}

}  // namespace mt::dist::dlcp
