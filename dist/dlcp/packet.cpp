#include "dist/dlcp/packet.h"

#include <cstring>

#include "core/error.h"

namespace mt::dist::dlcp {
namespace {

// Fields are written byte by byte, little endian, so the format does not depend on the host's
// struct layout or byte order.
void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v), p[1] = uint8_t(v >> 8); }
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

constexpr size_t kChecksumAt = 44;

uint32_t fnv1a(const uint8_t* data, size_t size, uint32_t h = 2166136261u) {
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  return h;
}

// The checksum skips its own four bytes (they are zero when it is computed).
uint32_t checksum_of(const uint8_t* packet, size_t size) {
  static const uint8_t zeros[4] = {0, 0, 0, 0};
  uint32_t h = fnv1a(packet, kChecksumAt);
  h = fnv1a(zeros, 4, h);
  return fnv1a(packet + kChecksumAt + 4, size - kChecksumAt - 4, h);
}

std::vector<uint8_t> encode(const PacketHeader& h, const uint8_t* payload, size_t payload_bytes) {
  MT_CHECK(kHeaderBytes + payload_bytes <= kMaxDatagramBytes, "DLCP packet of ", payload_bytes,
           " payload bytes exceeds a UDP datagram; lower dist.dlcp.packet_bytes");
  std::vector<uint8_t> out(kHeaderBytes + payload_bytes);
  uint8_t* p = out.data();
  put32(p + 0, kPacketMagic);
  p[4] = kPacketVersion;
  p[5] = static_cast<uint8_t>(h.kind);
  p[6] = h.priority;
  p[7] = h.flags;
  put32(p + 8, h.job);
  put16(p + 12, h.sender);
  put16(p + 14, h.bucket);
  put32(p + 16, h.iteration);
  put32(p + 20, h.transfer);
  put32(p + 24, h.offset);
  put16(p + 28, h.count);
  put16(p + 30, h.layer);
  put16(p + 32, h.contributors);
  put16(p + 34, static_cast<uint16_t>(payload_bytes));
  put32(p + 36, h.index);
  put32(p + 40, h.total);
  if (payload_bytes > 0) std::memcpy(p + kHeaderBytes, payload, payload_bytes);
  put32(p + kChecksumAt, checksum_of(p, out.size()));
  return out;
}

}  // namespace

float Packet::value(size_t i) const {
  uint32_t bits = get32(payload + 4 * i);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

bool Packet::bit(size_t i) const { return (payload[i / 8] >> (i % 8)) & 1; }

ParseResult parse_packet(const uint8_t* data, size_t size, Packet* out) {
  if (data == nullptr || size < 6) return ParseResult::Truncated;
  if (get32(data) != kPacketMagic || data[4] != kPacketVersion) return ParseResult::Foreign;
  if (size < kHeaderBytes) return ParseResult::Truncated;
  const size_t payload_bytes = get16(data + 34);
  if (size < kHeaderBytes + payload_bytes) return ParseResult::Truncated;
  if (size > kHeaderBytes + payload_bytes) return ParseResult::Malformed;  // trailing bytes
  if (get32(data + kChecksumAt) != checksum_of(data, size)) return ParseResult::Malformed;
  PacketHeader h;
  if (data[5] > static_cast<uint8_t>(PacketKind::Ack)) return ParseResult::Malformed;
  h.kind = static_cast<PacketKind>(data[5]);
  h.priority = data[6];
  h.flags = data[7];
  h.job = get32(data + 8);
  h.sender = get16(data + 12);
  h.bucket = get16(data + 14);
  h.iteration = get32(data + 16);
  h.transfer = get32(data + 20);
  h.offset = get32(data + 24);
  h.count = get16(data + 28);
  h.layer = get16(data + 30);
  h.contributors = get16(data + 32);
  h.index = get32(data + 36);
  h.total = get32(data + 40);
  if (h.priority >= kPriorityClasses) return ParseResult::Malformed;
  if (h.kind == PacketKind::Data) {
    if (h.count == 0 || h.count > kMaxElementsPerPacket || payload_bytes != 4u * h.count) return ParseResult::Malformed;
    if (h.index >= h.total) return ParseResult::Malformed;
    if (uint64_t(h.offset) + h.count > uint64_t(UINT32_MAX)) return ParseResult::Malformed;
  } else {
    if (payload_bytes != (h.count + 7u) / 8u) return ParseResult::Malformed;
    if (h.index > h.total || h.offset > h.total) return ParseResult::Malformed;
  }
  out->header = h;
  out->payload = data + kHeaderBytes;
  out->payload_bytes = payload_bytes;
  return ParseResult::Ok;
}

std::vector<uint8_t> encode_data(PacketHeader header, const float* values, uint16_t count) {
  MT_CHECK(count > 0 && count <= kMaxElementsPerPacket, "a DLCP data packet holds 1..", kMaxElementsPerPacket,
           " values (got ", count, ")");
  header.kind = PacketKind::Data;
  header.count = count;
  std::vector<uint8_t> payload(4u * count);
  for (uint16_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    put32(payload.data() + 4 * i, bits);
  }
  return encode(header, payload.data(), payload.size());
}

std::vector<uint8_t> encode_ack(PacketHeader header, const std::vector<bool>& bits) {
  MT_CHECK(bits.size() <= 65535, "a DLCP ack holds at most 65535 bits (got ", bits.size(), ")");
  header.kind = PacketKind::Ack;
  header.count = static_cast<uint16_t>(bits.size());
  std::vector<uint8_t> payload((bits.size() + 7) / 8, 0);
  for (size_t i = 0; i < bits.size(); ++i)
    if (bits[i]) payload[i / 8] |= uint8_t(1u << (i % 8));
  return encode(header, payload.data(), payload.size());
}

void reseal_packet(uint8_t* data, size_t size) {
  if (size >= kHeaderBytes) put32(data + kChecksumAt, checksum_of(data, size));
}

void PacketCounters::count(ParseResult r) {
  switch (r) {
    case ParseResult::Ok: break;
    case ParseResult::Truncated: ++truncated; break;
    case ParseResult::Foreign: ++foreign; break;
    case ParseResult::Malformed: ++malformed; break;
  }
}

}  // namespace mt::dist::dlcp
