// DLCP's packet format, receiver reassembly, priorities and window (dist/dlcp/): the parts that
// need no network. Checked: encode/parse round trips; truncated, foreign, malformed,
// stale-iteration, stale-transfer and out-of-range packets are counted and never written (guard
// elements around the buffer stay untouched); shuffled, duplicated and partly dropped packets
// reassemble to the right values with dropped ones zero and counts corrected; priority classes
// and DSCP; the loss allowance, and the bound in gradient contributions (a ring's late losses
// weigh the partial sums they carry, so a budget of p x contributions refuses what a per-transfer
// count of packets accepts; at any N the accepted share stays within p; the parameter-server
// form halves p between push and pull when the pull may lose); AIMD; per-path health (a path that lost half its recent packets
// or stayed silent is avoided, with a doubling but bounded avoidance; the timeout comes from the
// fastest usable path).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "dist/dlcp/congestion_window.h"
#include "dist/dlcp/packet.h"
#include "dist/dlcp/path_health.h"
#include "dist/dlcp/priority.h"
#include "dist/dlcp/ps_worker.h"
#include "dist/dlcp/reassembly.h"
#include "dist/dlcp/ring_allreduce.h"
#include "dist/dlcp/transport.h"

using namespace mt::dist::dlcp;

namespace {

PacketHeader data_header(uint32_t index, const TransferShape& shape) {
  PacketHeader h;
  h.job = 11, h.sender = 2, h.iteration = 5, h.transfer = 3;
  h.index = index, h.offset = shape.offset_of(index), h.total = shape.packets();
  h.contributors = 1;
  return h;
}

std::vector<uint8_t> data_packet(uint32_t index, const TransferShape& shape, const std::vector<float>& source,
                                 uint16_t contributors = 1) {
  PacketHeader h = data_header(index, shape);
  h.contributors = contributors;
  return encode_data(h, source.data() + h.offset, shape.count_of(index));
}

// The packet points into `bytes` (a parsed packet is a view): keep them alive while it is read.
Packet parsed(const std::vector<uint8_t>& bytes) {
  Packet p;
  EXPECT_EQ(parse_packet(bytes.data(), bytes.size(), &p), ParseResult::Ok);
  return p;
}

const TransferId kId{11, 2, 5, 3};

}  // namespace

TEST(DlcpPacket, DataRoundTrip) {
  PacketHeader h;
  h.job = 0xA1B2C3D4, h.sender = 7, h.bucket = 9, h.iteration = 123456, h.transfer = 77, h.offset = 1000;
  h.layer = 3, h.contributors = 4, h.index = 10, h.total = 20, h.priority = 2;
  const std::vector<float> v = {1.5f, -2.25f, 3.0e-8f, 65504.0f};
  const auto bytes = encode_data(h, v.data(), 4);
  EXPECT_EQ(bytes.size(), kHeaderBytes + 16);
  const Packet p = parsed(bytes);
  EXPECT_EQ(p.header.kind, PacketKind::Data);
  EXPECT_EQ(p.header.job, 0xA1B2C3D4u);
  EXPECT_EQ(p.header.sender, 7);
  EXPECT_EQ(p.header.bucket, 9);
  EXPECT_EQ(p.header.iteration, 123456u);
  EXPECT_EQ(p.header.transfer, 77u);
  EXPECT_EQ(p.header.offset, 1000u);
  EXPECT_EQ(p.header.count, 4);
  EXPECT_EQ(p.header.layer, 3);
  EXPECT_EQ(p.header.contributors, 4);
  EXPECT_EQ(p.header.index, 10u);
  EXPECT_EQ(p.header.total, 20u);
  EXPECT_EQ(p.header.priority, 2);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(p.value(i), v[i]);
}

TEST(DlcpPacket, AckRoundTrip) {
  PacketHeader h;
  h.total = 40, h.offset = 5, h.index = 17, h.flags = kAckDone;
  std::vector<bool> bits = {true, false, false, true, true, false, true, true, true, false, true};
  const auto bytes = encode_ack(h, bits);
  const Packet p = parsed(bytes);
  EXPECT_EQ(p.header.kind, PacketKind::Ack);
  EXPECT_EQ(p.header.count, bits.size());
  EXPECT_TRUE(p.header.flags & kAckDone);
  for (size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(p.bit(i), bits[i]) << i;
}

TEST(DlcpPacket, BadInputIsClassifiedNeverAccepted) {
  const TransferShape shape{100, 10};
  std::vector<float> src(100, 1.0f);
  const auto good = data_packet(3, shape, src);
  Packet p;
  PacketCounters counters;
  auto classify = [&](std::vector<uint8_t> b) {
    const ParseResult r = parse_packet(b.data(), b.size(), &p);
    counters.count(r);
    return r;
  };
  // Truncated: every prefix of a good packet.
  for (size_t n = 0; n < good.size(); ++n) {
    const ParseResult r = classify(std::vector<uint8_t>(good.begin(), good.begin() + n));
    EXPECT_EQ(r, ParseResult::Truncated) << n;
  }
  // Foreign: another magic, another version.
  auto other = good;
  other[0] ^= 0xFF;
  EXPECT_EQ(classify(other), ParseResult::Foreign);
  other = good;
  other[4] = kPacketVersion + 1;
  EXPECT_EQ(classify(other), ParseResult::Foreign);
  // Malformed: a flipped payload bit (checksum), trailing bytes, fields that contradict each
  // other even with a valid checksum.
  other = good;
  other.back() ^= 1;
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  other = good;
  other.push_back(0);
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  other = good;
  other[28] = 3;  // count 3 but 40 payload bytes
  reseal_packet(other.data(), other.size());
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  other = good;
  other[36] = 50, other[40] = 20;  // index 50 of 20 packets
  reseal_packet(other.data(), other.size());
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  other = good;
  other[6] = kPriorityClasses;  // no such class
  reseal_packet(other.data(), other.size());
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  other = good;
  other[5] = 9;  // no such kind
  reseal_packet(other.data(), other.size());
  EXPECT_EQ(classify(other), ParseResult::Malformed);
  EXPECT_EQ(counters.foreign, 2u);
  EXPECT_EQ(counters.malformed, 6u);
  EXPECT_EQ(counters.truncated, good.size());
  EXPECT_EQ(classify(good), ParseResult::Ok);
}

TEST(DlcpReassembly, RefusedPacketsWriteNothing) {
  const TransferShape shape{100, 10};
  std::vector<float> src(100);
  std::iota(src.begin(), src.end(), 1.0f);
  // The transfer's buffer sits between guard elements that must stay untouched.
  std::vector<float> memory(140, -7.0f);
  std::vector<uint16_t> counts(140, 9);
  float* buffer = memory.data() + 20;
  Reassembly r(shape, kId, buffer, counts.data() + 20, WriteMode::Overwrite);
  PacketCounters c;
  auto offer = [&](PacketHeader h, uint16_t count = 10) {
    std::vector<float> payload(count, 99.0f);
    return r.accept(parsed(encode_data(h, payload.data(), count)), &c);
  };
  PacketHeader h = data_header(9, shape);
  auto changed = h;
  changed.job = 12;
  EXPECT_EQ(offer(changed), Accepted::Foreign);
  changed = h, changed.sender = 1;
  EXPECT_EQ(offer(changed), Accepted::Foreign);
  changed = h, changed.iteration = 4;  // stale iteration
  EXPECT_EQ(offer(changed), Accepted::Stale);
  changed = h, changed.transfer = 2;   // a finished transfer
  EXPECT_EQ(offer(changed), Accepted::Stale);
  changed = h, changed.transfer = 4;   // a later transfer: the caller keeps it
  EXPECT_EQ(offer(changed), Accepted::Early);
  changed = h, changed.offset = 95;    // would run 5 past the end
  EXPECT_EQ(offer(changed), Accepted::OutOfRange);
  changed = h, changed.index = 10, changed.offset = 100, changed.total = 11;
  EXPECT_EQ(offer(changed), Accepted::OutOfRange);
  changed = h;
  EXPECT_EQ(offer(changed, 11), Accepted::OutOfRange);  // one value too many
  changed = h, changed.total = 12;
  EXPECT_EQ(offer(changed), Accepted::OutOfRange);
  EXPECT_EQ(c.foreign, 2u);
  EXPECT_EQ(c.stale, 2u);
  EXPECT_EQ(c.out_of_range, 4u);
  EXPECT_EQ(r.received(), 0u);
  for (size_t i = 0; i < memory.size(); ++i) EXPECT_EQ(memory[i], -7.0f) << i;
  for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], 9) << i;
  // The good one lands exactly in its place.
  EXPECT_EQ(offer(h), Accepted::Written);
  for (size_t i = 0; i < memory.size(); ++i) EXPECT_EQ(memory[i], (i >= 110 && i < 120) ? 99.0f : -7.0f) << i;
}

TEST(DlcpReassembly, ShuffledDuplicatedAndDroppedPacketsReassemble) {
  const TransferShape shape{1003, 17};  // the last packet is short
  std::vector<float> src(shape.elements);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i % 97) - 40.0f;
  std::vector<std::vector<uint8_t>> packets;
  for (uint32_t i = 0; i < shape.packets(); ++i) packets.push_back(data_packet(i, shape, src, 3));
  const std::vector<uint32_t> dropped = {0, 7, 8, shape.packets() - 1};
  std::vector<std::vector<uint8_t>> wire;
  for (uint32_t i = 0; i < packets.size(); ++i) {
    if (std::find(dropped.begin(), dropped.end(), i) != dropped.end()) continue;
    wire.push_back(packets[i]);
    if (i % 5 == 0) wire.push_back(packets[i]);  // duplicates
  }
  std::shuffle(wire.begin(), wire.end(), std::mt19937(42));

  // Overwrite (an allgather step): dropped packets become 0 with count 0.
  std::vector<float> out(shape.elements, 123.0f);
  std::vector<uint16_t> counts(shape.elements, 1);
  Reassembly r(shape, kId, out.data(), counts.data(), WriteMode::Overwrite);
  PacketCounters c;
  for (const auto& b : wire) r.accept(parsed(b), &c);
  EXPECT_EQ(r.received(), shape.packets() - dropped.size());
  EXPECT_EQ(c.duplicate, (shape.packets() + 4) / 5 - 1);  // packet 0 was dropped
  EXPECT_FALSE(r.arrived_all()[0]);  // the first packet missing
  r.zero_missing();
  for (uint32_t i = 0; i < shape.elements; ++i) {
    const bool lost = std::find(dropped.begin(), dropped.end(), i / 17) != dropped.end();
    EXPECT_EQ(out[i], lost ? 0.0f : src[i]) << i;
    EXPECT_EQ(counts[i], lost ? 0 : 3) << i;
  }

  // Add (a reduce-scatter step): dropped packets keep the local value, counted once.
  std::vector<float> sum(shape.elements, 1.0f);
  std::vector<uint16_t> sum_counts(shape.elements, 1);
  Reassembly a(shape, kId, sum.data(), sum_counts.data(), WriteMode::Add);
  for (const auto& b : wire) a.accept(parsed(b));
  for (uint32_t i = 0; i < shape.elements; ++i) {
    const bool lost = std::find(dropped.begin(), dropped.end(), i / 17) != dropped.end();
    EXPECT_EQ(sum[i], lost ? 1.0f : 1.0f + src[i]) << i;
    EXPECT_EQ(sum_counts[i], lost ? 1 : 4) << i;
  }
  const std::vector<bool>& arrived = a.arrived_all();
  EXPECT_EQ(std::vector<bool>(arrived.begin() + 7, arrived.begin() + 10), (std::vector<bool>{false, false, true}));
}

TEST(DlcpPriority, ClassesFollowLayerAndMagnitude) {
  const auto out = PriorityDirection::OutputFirst, in = PriorityDirection::InputFirst;
  EXPECT_EQ(priority_class(1.0, 2.0, out), 3);   // output layer, large
  EXPECT_EQ(priority_class(1.0, 0.5, out), 2);   // output layer, small
  EXPECT_EQ(priority_class(0.0, 2.0, out), 1);   // input layer, large
  EXPECT_EQ(priority_class(0.0, 0.5, out), 0);
  EXPECT_EQ(priority_class(0.0, 2.0, in), 3);
  EXPECT_EQ(priority_class(1.0, 0.1, in), 0);
  EXPECT_EQ(dscp_of_class(0), 8);    // CS1
  EXPECT_EQ(dscp_of_class(3), 32);   // CS4
  EXPECT_EQ(tos_of_class(3), 0x80);
  EXPECT_THROW(dscp_of_class(4), mt::core::Error);
  EXPECT_EQ(priority_direction_from("input_first"), in);
  try {
    priority_direction_from("middle");
    FAIL() << "accepted";
  } catch (const mt::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dist.dlcp.priority_direction"), std::string::npos) << e.what();
  }
}

TEST(DlcpWindow, AimdAndLossAllowance) {
  using Clock = CongestionWindow::Clock;
  CongestionWindow w(4, 1000);
  w.on_acked(4);                      // slow start: +1 per ack
  EXPECT_DOUBLE_EQ(w.window(), 8);
  const auto t0 = Clock::now();
  w.on_loss(t0, t0 + std::chrono::milliseconds(1));
  EXPECT_DOUBLE_EQ(w.window(), 4);    // halved
  w.on_loss(t0, t0 + std::chrono::milliseconds(2));  // sent before the decrease: same event
  EXPECT_DOUBLE_EQ(w.window(), 4);
  w.on_acked(4);                      // congestion avoidance: +1 per window
  EXPECT_NEAR(w.window(), 5, 0.1);
  EXPECT_EQ(w.decreases(), 1u);
  EXPECT_EQ(allowed_missing(100, 0.0), 0u);
  EXPECT_EQ(allowed_missing(100, 0.03), 3u);
  EXPECT_EQ(allowed_missing(99, 0.03), 2u);
}

TEST(DlcpLossBound, TheRingWeighsALossByThePartialSumsItCarries) {
  // Reduce-scatter step s carries s + 1 ranks' partial sums; an allgather packet lost at step s
  // leaves N - 1 - s ranks without its range's sum.
  const std::vector<uint32_t> weights = {1, 2, 3, 3, 2, 1};
  for (int step = 0; step < 6; ++step) EXPECT_EQ(ring_loss_weight(4, step), weights[size_t(step)]) << step;
  // 4 chunks of 100 packets: 400 ranges, this rank's share of the 1600 contributions; p = 1 %
  // lets it lose 4 of them.
  ASSERT_EQ(ring_packet_ranges(4 * 100 * 8, 4, 8), 400u);
  LossBudget budget{0.01 * 400};
  // One packet lost at each reduce-scatter step: a count per transfer (floor(p x 100) = 1)
  // accepts all three, 1 + 2 + 3 = 6 contributions, 1.5 % of them.
  EXPECT_EQ(allowed_missing(100, 0.01), 1u);
  EXPECT_EQ(budget.packets(ring_loss_weight(4, 0)), 4u);
  budget.spend(1, ring_loss_weight(4, 0));
  EXPECT_EQ(budget.packets(ring_loss_weight(4, 1)), 1u);
  budget.spend(1, ring_loss_weight(4, 1));
  EXPECT_EQ(budget.packets(ring_loss_weight(4, 2)), 0u) << "a third loss would take 6 contributions of the 4 allowed";
  // The last step's loss alone fits: 3 of 4.
  EXPECT_EQ((LossBudget{0.01 * 400}.packets(ring_loss_weight(4, 2))), 1u);
  EXPECT_EQ((LossBudget{4.0, 4}.packets(1)), 0u);
  EXPECT_EQ((LossBudget{4.0, 5}.packets(1)), 0u) << "an overspent budget allows nothing";
}

TEST(DlcpLossBound, AtAnyRingSizeTheAcceptedShareStaysWithinP) {
  // Every transfer losing as many packets as it may, on a 1 % bound: the per-transfer count's
  // weighted loss grows about as p (N - 1) / 2, the budget's stays within p.
  std::mt19937 random(3);
  for (int ranks : {2, 4, 8, 16, 64}) {
    const uint16_t per_packet = 8;
    const uint32_t elements = uint32_t(ranks) * 400 * per_packet + 5;  // a short last packet
    const uint64_t ranges = ring_packet_ranges(elements, ranks, per_packet);
    LossBudget budget{0.01 * double(ranges)};
    uint64_t per_transfer = 0;
    for (int step = 0; step < 2 * (ranks - 1); ++step) {
      const uint32_t weight = ring_loss_weight(ranks, step);
      per_transfer += uint64_t(allowed_missing(400, 0.01)) * weight;
      const uint32_t may = budget.packets(weight);
      budget.spend(random() % 2 ? may : may / 2, weight);
    }
    EXPECT_LE(double(budget.spent), 0.01 * double(ranges)) << ranks << " ranks";
    if (ranks >= 4) {
      EXPECT_GT(double(per_transfer), 0.01 * double(ranges)) << ranks << " ranks";
    }
  }
  // The parameter-server form: a lost push or pull packet is one contribution; with a lossy
  // pull, p is shared between the two.
  DlcpOptions o;
  o.exchange.loss_bound = 0.02;
  EXPECT_DOUBLE_EQ(ps_exchange_options(o).loss_bound, 0.02);
  o.lossless_pull = false;
  EXPECT_DOUBLE_EQ(ps_exchange_options(o).loss_bound, 0.01);
}

TEST(DlcpPaths, ALossyPathIsAvoidedWithABoundedBackoff) {
  using Clock = PathHealth::Clock;
  using std::chrono::milliseconds;
  const auto t0 = Clock::now();
  PathSet paths(2);
  for (int k = 0; k < 8; ++k) paths[0].on_delivered(milliseconds(1)), paths[1].on_delivered(milliseconds(1));
  // One loss in ten, as a lossy but working path shows: never avoided.
  for (int k = 0; k < 100; ++k) {
    if (k % 10 == 3) paths[1].on_lost(false, t0);
    else paths[1].on_delivered(milliseconds(1));
  }
  EXPECT_EQ(paths[1].times_avoided(), 0u);
  // Half of the last packets lost (8 or more known): avoided, and packets go to the other path.
  for (int k = 0; k < 8; ++k) paths[0].on_lost(false, t0);
  EXPECT_TRUE(paths[0].avoided(t0));
  EXPECT_FALSE(paths.usable(0, t0));
  EXPECT_EQ(paths.next_usable(0, t0), 1);
  EXPECT_EQ(paths.for_resend(0, t0), 1) << "a packet lost on path 0 is resent on path 1";
  EXPECT_EQ(paths.for_resend(1, t0), 1) << "never on an avoided path";
  // Found bad again right after each avoidance ends: the avoidance doubles, up to a bound.
  Clock::time_point now = t0;
  std::vector<int64_t> spans;
  for (int round = 0; round < 8; ++round) {
    const auto until = paths[0].avoided_until();
    spans.push_back(std::chrono::duration_cast<milliseconds>(until - now).count());
    now = until;
    EXPECT_TRUE(paths.usable(0, now)) << "round " << round;
    paths[0].on_lost(/*silent=*/true, now);  // silent while path 1 answered: at once
  }
  EXPECT_EQ(spans[0], 20);
  EXPECT_EQ(spans[1], 40);
  EXPECT_EQ(spans[2], 80);
  EXPECT_EQ(spans.back(), 320) << "the backoff is bounded";
  // Losses of packets sent before the avoidance do not extend it.
  const auto until = paths[0].avoided_until();
  paths[0].on_lost(true, now + milliseconds(1));
  EXPECT_EQ(paths[0].avoided_until(), until);
  // Long after, a new bad spell starts from the base again.
  const auto later = until + std::chrono::seconds(5);
  paths[0].on_lost(true, later);
  EXPECT_EQ(paths[0].avoided_until() - later, Clock::duration(milliseconds(20)));
  // Every path avoided: the one whose avoidance ends first still takes packets.
  paths[1].on_lost(true, later + milliseconds(1));
  EXPECT_TRUE(paths.usable(0, later + milliseconds(2)));
  EXPECT_FALSE(paths.usable(1, later + milliseconds(2)));
}

// A path that delivered a packet sent after a lost one works: the lost one was a drop, and the
// transport does not call the path silent for it (random loss must not tilt the spraying).
TEST(DlcpPaths, APathThatStillDeliversIsNotSilent) {
  using Clock = PathHealth::Clock;
  using std::chrono::milliseconds;
  const auto t0 = Clock::now();
  PathHealth path;
  EXPECT_FALSE(path.reached_after(t0)) << "nothing delivered yet";
  path.on_reached(t0 + milliseconds(3));
  EXPECT_TRUE(path.reached_after(t0 + milliseconds(1)));
  EXPECT_FALSE(path.reached_after(t0 + milliseconds(3)));
  path.on_reached(t0 + milliseconds(2));  // a late acknowledgement of an older packet
  EXPECT_FALSE(path.reached_after(t0 + milliseconds(4))) << "the newest delivery counts, not the last ack";
}

TEST(DlcpPaths, TheTimeoutComesFromTheFastestUsablePath) {
  using Clock = PathHealth::Clock;
  using std::chrono::milliseconds;
  const auto t0 = Clock::now();
  PathSet paths(2);
  EXPECT_EQ(paths.retransmit_timeout(t0), Clock::duration(milliseconds(20))) << "before any sample";
  // Path 0 queued behind a hotspot (400 ms round trips), path 1 quick.
  for (int k = 0; k < 8; ++k) paths[0].on_delivered(milliseconds(400)), paths[1].on_delivered(milliseconds(2));
  EXPECT_GT(paths[0].retransmit_timeout(), Clock::duration(milliseconds(300)));
  EXPECT_LE(paths.retransmit_timeout(t0), Clock::duration(milliseconds(6)))
      << "a slow path must not stretch the timeout of the packets on the quick one";
  // With the quick path avoided, the slow one's timeout is what is left.
  paths[1].on_lost(true, t0);
  EXPECT_EQ(paths.retransmit_timeout(t0), paths[0].retransmit_timeout());
  PathHealth fresh;
  fresh.on_delivered(milliseconds(0));  // no sample (a resent packet): no estimate yet
  EXPECT_FALSE(fresh.has_rtt());
}
