#include "dist/dlcp/reassembly.h"

#include <algorithm>

#include "core/error.h"

namespace mt::dist::dlcp {

uint16_t TransferShape::count_of(uint32_t index) const {
  const uint32_t start = offset_of(index);
  return static_cast<uint16_t>(std::min<uint32_t>(per_packet, elements - start));
}

Reassembly::Reassembly(TransferShape shape, TransferId id, float* values, uint16_t* counts, WriteMode mode)
    : shape_(shape), id_(id), values_(values), counts_(counts), mode_(mode), arrived_(shape.packets(), false) {
  MT_CHECK(shape_.per_packet >= 1 && shape_.per_packet <= kMaxElementsPerPacket, "DLCP: ", shape_.per_packet,
           " elements per packet is outside 1..", kMaxElementsPerPacket);
  MT_CHECK(values_ != nullptr || shape_.elements == 0, "DLCP: a transfer of ", shape_.elements,
           " elements needs a destination buffer");
}

Accepted Reassembly::accept(const Packet& p, PacketCounters* counters) {
  const PacketHeader& h = p.header;
  auto refuse = [&](Accepted why, uint64_t PacketCounters::*counter) {
    if (counters) ++(counters->*counter);
    return why;
  };
  if (h.kind != PacketKind::Data || h.job != id_.job || h.sender != id_.sender)
    return refuse(Accepted::Foreign, &PacketCounters::foreign);
  if (h.transfer < id_.transfer) return refuse(Accepted::Stale, &PacketCounters::stale);
  if (h.transfer > id_.transfer) return Accepted::Early;  // the caller keeps or drops it
  if (h.iteration != id_.iteration) return refuse(Accepted::Stale, &PacketCounters::stale);
  // The packet's place must be exactly the one the shape gives its index: then offset + count
  // stays inside the buffer.
  if (h.total != shape_.packets() || h.index >= shape_.packets() || h.offset != shape_.offset_of(h.index) ||
      h.count != shape_.count_of(h.index) || p.payload_bytes != 4u * h.count)
    return refuse(Accepted::OutOfRange, &PacketCounters::out_of_range);
  if (arrived_[h.index]) return refuse(Accepted::Duplicate, &PacketCounters::duplicate);
  arrived_[h.index] = true;
  ++received_;
  if (priority_) priority_[h.index] = h.priority;
  if (layer_) layer_[h.index] = h.layer;
  float* out = values_ + h.offset;
  uint16_t* count = counts_ ? counts_ + h.offset : nullptr;
  if (mode_ == WriteMode::Add) {
    for (uint16_t i = 0; i < h.count; ++i) out[i] += p.value(i);
    if (count)
      for (uint16_t i = 0; i < h.count; ++i) count[i] = static_cast<uint16_t>(count[i] + h.contributors);
  } else {
    for (uint16_t i = 0; i < h.count; ++i) out[i] = p.value(i);
    if (count) std::fill(count, count + h.count, h.contributors);
  }
  return Accepted::Written;
}

void Reassembly::zero_missing() {
  for (uint32_t i = 0; i < arrived_.size(); ++i) {
    if (arrived_[i]) continue;
    const uint32_t at = shape_.offset_of(i), n = shape_.count_of(i);
    std::fill(values_ + at, values_ + at + n, 0.0f);
    if (counts_) std::fill(counts_ + at, counts_ + at + n, uint16_t(0));
  }
}

}  // namespace mt::dist::dlcp
