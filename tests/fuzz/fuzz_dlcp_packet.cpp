// Fuzzes DLCP's packet parser and the receiver's reassembly (dist/dlcp/packet.h,
// dist/dlcp/reassembly.h): datagrams from the network are untrusted. The first byte picks
// whether the checksum is repaired after mutation (so the field checks behind it are reached).
// A packet the parser accepts is handed to a reassembly of a transfer whose identity matches
// its header, writing into a buffer of exactly the transfer's size: AddressSanitizer reports
// any write outside it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/dlcp/packet.h"
#include "dist/dlcp/reassembly.h"

using namespace mt::dist::dlcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool repair = data[0] & 1;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (repair) reseal_packet(bytes.data(), bytes.size());
  Packet p;
  const ParseResult r = parse_packet(bytes.data(), bytes.size(), &p);
  if (r != ParseResult::Ok) return 0;
  if (p.header.kind == PacketKind::Ack) {
    bool any = false;
    for (size_t i = 0; i < p.header.count; ++i) any ^= p.bit(i);  // reads the whole bitmap
    (void)any;
    return 0;
  }
  // A transfer of 1000 elements in packets of 16: only headers that match it are written.
  const TransferShape shape{1000, 16};
  std::vector<float> values(shape.elements, 0.0f);
  std::vector<uint16_t> counts(shape.elements, 1);
  const TransferId id{p.header.job, p.header.sender, p.header.iteration, p.header.transfer};
  Reassembly add(shape, id, values.data(), counts.data(), WriteMode::Add);
  PacketCounters counters;
  add.accept(p, &counters);
  add.accept(p, &counters);  // the duplicate path
  Reassembly overwrite(shape, id, values.data(), counts.data(), WriteMode::Overwrite);
  overwrite.accept(p, &counters);
  overwrite.zero_missing();
  if (add.received() > 1 || overwrite.received() > 1) __builtin_trap();  // a duplicate counted twice
  return 0;
}
