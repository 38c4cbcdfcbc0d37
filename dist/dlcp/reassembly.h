// The receiving half of one DLCP transfer: data packets of one sender, one iteration and one
// transfer number, written straight to their offsets in the destination buffer. Order does not
// matter, a duplicate is recognized by its packet index and ignored, and a packet whose place
// does not match the transfer's geometry is refused before anything is written, so no packet can
// write outside the buffer. What never arrives stays as the caller left it (Add: the local
// values and counts) or, after zero_missing(), zero with count 0 (Overwrite).
#pragma once
#include <cstdint>
#include <vector>

#include "dist/dlcp/packet.h"

namespace mt::dist::dlcp {

// How a transfer of `elements` float32 values is cut: packet i holds elements
// [i * per_packet, min((i + 1) * per_packet, elements)). Both ends compute it from the config.
struct TransferShape {
  uint32_t elements = 0;
  uint16_t per_packet = 1;
  uint32_t packets() const { return elements == 0 ? 0 : (elements + per_packet - 1) / per_packet; }
  uint32_t offset_of(uint32_t index) const { return index * uint32_t(per_packet); }
  uint16_t count_of(uint32_t index) const;
};

// Which packets belong to this transfer.
struct TransferId {
  uint32_t job = 0;
  uint16_t sender = 0;
  uint32_t iteration = 0;
  uint32_t transfer = 0;
};

enum class WriteMode { Add, Overwrite };

enum class Accepted { Written, Duplicate, Foreign, Stale, Early, OutOfRange };

class Reassembly {
 public:
  // values (and counts, when not null) hold shape.elements entries and outlive this object.
  Reassembly(TransferShape shape, TransferId id, float* values, uint16_t* counts, WriteMode mode);

  // A data packet (parse_packet said Ok); counters get the reason of a refusal.
  Accepted accept(const Packet& packet, PacketCounters* counters = nullptr);

  uint32_t received() const { return received_; }
  uint32_t packets() const { return shape_.packets(); }
  bool complete() const { return received_ == shape_.packets(); }
  bool arrived(uint32_t index) const { return arrived_[index]; }
  const std::vector<bool>& arrived_all() const { return arrived_; }
  // Overwrite mode: values and counts of every missing packet become 0.
  void zero_missing();
  // From now on each written packet's class and layer go to priority[index] and layer[index]
  // (either may be null; each holds packets() entries).
  void record_tags(uint8_t* priority, uint16_t* layer) { priority_ = priority, layer_ = layer; }
  const TransferShape& shape() const { return shape_; }
  const TransferId& id() const { return id_; }

 private:
  TransferShape shape_;
  TransferId id_;
  float* values_;
  uint16_t* counts_;
  WriteMode mode_;
  std::vector<bool> arrived_;
  uint32_t received_ = 0;
  uint8_t* priority_ = nullptr;
  uint16_t* layer_ = nullptr;
};

}  // namespace mt::dist::dlcp
