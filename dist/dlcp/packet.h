// DLCP's datagram format: one UDP datagram carries one packet, either a slice of gradient values
// (data) or the receiver's view of a transfer (ack). Every field the receiver needs to place the
// values travels in the packet, so datagrams may arrive in any order, twice, or not at all.
//
//   bytes  field          data packet                      ack packet
//   0..3   magic "DLCP"
//   4      version        kPacketVersion
//   5      kind           Data                             Ack
//   6      priority       class 0 (dropped first) .. 3     3: acks and probes go first
//   7      flags          -                                kAckDone: the receiver stopped waiting;
//                                                          kAckProbe: the sender asks for an ack
//   8..11  job            the job's id: packets of another job are foreign
//   12..13 sender         the sending rank
//   14..15 bucket         which tensor/bucket of the iteration
//   16..19 iteration      the training iteration
//   20..23 transfer       sequence number of the transfer on this sender -> receiver channel
//   24..27 offset         first element                    base: packets below it all arrived
//   28..29 count          elements (<= 16383)              bits in the bitmap payload
//   30..31 layer          the layer of the first element   -
//   32..33 contributors   ranks summed into these values   the probe it answers (0: none);
//                                                          in a probe: its number
//   34..35 payload_bytes  4 * count                        ceil(count / 8)
//   36..39 index          packet index in the transfer     packets received so far
//   40..43 total          packets in the transfer          packets in the transfer
//   44..47 checksum       FNV-1a over the header (this field as 0) and the payload
//   48..   payload        float32 values (little endian)   bitmap: bit i = packet base + i arrived
//
// The parser checks everything it can without knowing the transfer (magic, version, length,
// checksum, field consistency); the receiver then checks the rest (reassembly.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mt::dist::dlcp {

constexpr uint32_t kPacketMagic = 0x50434C44;  // "DLCP" read as a little-endian word
constexpr uint8_t kPacketVersion = 1;
constexpr size_t kHeaderBytes = 48;
constexpr size_t kMaxDatagramBytes = 65507;  // the largest UDP payload over IPv4
constexpr uint16_t kMaxElementsPerPacket = 16383;
constexpr int kPriorityClasses = 4;

enum class PacketKind : uint8_t { Data = 0, Ack = 1 };
constexpr uint8_t kAckDone = 1;
constexpr uint8_t kAckProbe = 2;  // from the sender: "tell me what you have" (no bitmap)

struct PacketHeader {
  PacketKind kind = PacketKind::Data;
  uint8_t priority = 0;
  uint8_t flags = 0;
  uint32_t job = 0;
  uint16_t sender = 0;
  uint16_t bucket = 0;
  uint32_t iteration = 0;
  uint32_t transfer = 0;
  uint32_t offset = 0;
  uint16_t count = 0;
  uint16_t layer = 0;
  uint16_t contributors = 0;
  uint32_t index = 0;
  uint32_t total = 0;
};

// A parsed packet: the header and a view of the payload inside the caller's buffer.
struct Packet {
  PacketHeader header;
  const uint8_t* payload = nullptr;
  size_t payload_bytes = 0;

  float value(size_t i) const;            // data: element i of the payload (i < header.count)
  bool bit(size_t i) const;               // ack: bitmap bit i (i < header.count)
};

enum class ParseResult {
  Ok,
  Truncated,    // shorter than the header, or than the payload the header announces
  Foreign,      // not a DLCP packet of this version (magic or version differ)
  Malformed,    // checksum wrong, unknown kind, or fields that contradict each other
};

// Parses `size` bytes; on Ok fills *out (its payload points into `data`). Never reads past
// data + size, never throws.
ParseResult parse_packet(const uint8_t* data, size_t size, Packet* out);

// A data packet: `count` values from `values` (header.count and payload_bytes are set here).
std::vector<uint8_t> encode_data(PacketHeader header, const float* values, uint16_t count);
// An ack packet: `bits` bits of the bitmap (bit i = packet header.offset + i arrived).
std::vector<uint8_t> encode_ack(PacketHeader header, const std::vector<bool>& bits);

// Rewrites the checksum of `size` bytes (>= kHeaderBytes) to match their content: tests and the
// fuzz target use it to reach the checks behind the checksum.
void reseal_packet(uint8_t* data, size_t size);

// What the receiver threw away, by reason: never written anywhere.
struct PacketCounters {
  uint64_t truncated = 0;
  uint64_t foreign = 0;       // other magic/version, other job, or a sender that is not the peer
  uint64_t malformed = 0;
  uint64_t stale = 0;         // an iteration or transfer already finished
  uint64_t out_of_range = 0;  // offset/count/index outside the transfer
  uint64_t duplicate = 0;
  uint64_t dropped_early = 0; // for a later transfer, beyond the buffer kept for it

  void count(ParseResult r);
  uint64_t rejected() const { return truncated + foreign + malformed + stale + out_of_range; }
};

}  // namespace mt::dist::dlcp
