#include "dist/dlcp/transport.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.h"

namespace mt::dist::dlcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kAckBits = 8000;          // an ack's bitmap: 1000 bytes
constexpr size_t kEarlyLimit = 1 << 16;    // packets kept per peer for a later transfer
constexpr size_t kFinishedKept = 8;        // finished transfers answered per peer
constexpr int kReorderThreshold = 3;       // as TCP's three duplicate acks
constexpr auto kTick = std::chrono::microseconds(500);

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

Spray spray_from(const std::string& name) {
  if (name == "round_robin") return Spray::RoundRobin;
  if (name == "least_loaded") return Spray::LeastLoaded;
  MT_FAIL("unknown dist.dlcp.spray \"", name, "\"; valid names are: round_robin, least_loaded");
}

uint32_t allowed_missing(uint32_t packets, double loss_bound) {
  return static_cast<uint32_t>(std::floor(loss_bound * packets + 1e-9));
}

void ExchangeStats::add(const ExchangeStats& o) {
  packets_sent += o.packets_sent;
  retransmissions += o.retransmissions;
  probes += o.probes;
  packets_expected += o.packets_expected;
  packets_received += o.packets_received;
  packets_missing += o.packets_missing;
  deadline_endings += o.deadline_endings;
  window_decreases += o.window_decreases;
  seconds += o.seconds;
  rejected.truncated += o.rejected.truncated;
  rejected.foreign += o.rejected.foreign;
  rejected.malformed += o.rejected.malformed;
  rejected.stale += o.rejected.stale;
  rejected.out_of_range += o.rejected.out_of_range;
  rejected.duplicate += o.rejected.duplicate;
  rejected.dropped_early += o.rejected.dropped_early;
}

Transport::Transport(std::shared_ptr<DatagramEndpoint> endpoint, int rank, uint32_t job, ExchangeOptions options)
    : endpoint_(std::move(endpoint)), rank_(rank), job_(job), options_(options) {
  MT_CHECK(endpoint_ != nullptr, "DLCP transport needs an endpoint");
  MT_CHECK(options_.loss_bound >= 0 && options_.loss_bound < 1, "dist.dlcp.loss_bound must be in [0, 1) (got ",
           options_.loss_bound, ")");
  MT_CHECK(options_.elements_per_packet >= 1 && options_.elements_per_packet <= kMaxElementsPerPacket,
           "DLCP: ", options_.elements_per_packet, " elements per packet is outside 1..", kMaxElementsPerPacket);
  MT_CHECK(options_.ack_every >= 1, "DLCP: ack_every must be >= 1");
}

Transport::Peer& Transport::peer(int rank) {
  auto it = peers_.find(rank);
  if (it == peers_.end()) {
    it = peers_.emplace(rank, Peer{}).first;
    it->second.window = CongestionWindow(options_.initial_window);
  }
  return it->second;
}

void Transport::send_ack(int to, const PacketHeader& of, const std::vector<bool>& arrived, uint32_t received,
                         bool done) {
  PacketHeader h;
  h.kind = PacketKind::Ack;
  h.job = job_;
  h.sender = static_cast<uint16_t>(rank_);
  h.iteration = of.iteration;
  h.transfer = of.transfer;
  h.bucket = of.bucket;
  h.flags = done ? kAckDone : 0;
  h.total = static_cast<uint32_t>(arrived.size());
  h.index = received;
  const uint32_t base =
      static_cast<uint32_t>(std::find(arrived.begin(), arrived.end(), false) - arrived.begin());
  h.offset = base;
  std::vector<bool> bits;
  for (size_t i = base; i < arrived.size() && bits.size() < kAckBits; ++i) bits.push_back(arrived[i]);
  const auto bytes = encode_ack(h, bits);
  // Acks go back on the first path; a full socket buffer loses this one (the next ack or the
  // sender's probe recovers).
  endpoint_->send(to, 0, h, bytes);
}

void Transport::answer_finished(int from, const Packet& p, PacketCounters* counters) {
  for (const Finished& f : peer(from).finished) {
    if (f.transfer != p.header.transfer) continue;
    if (f.iteration != p.header.iteration || p.header.total != f.arrived.size()) break;  // not that transfer's
    send_ack(from, p.header, f.arrived, f.received, /*done=*/true);
    if (p.header.kind == PacketKind::Data) ++counters->duplicate;  // a late copy, written nowhere
    return;
  }
  if (p.header.kind == PacketKind::Data) ++counters->stale;
}

ExchangeStats Transport::exchange(const OutgoingTransfer* out, const IncomingTransfer* in, bool lossless) {
  const double loss_bound = lossless ? 0.0 : options_.loss_bound;
  if (out && out->elements == 0) out = nullptr;
  if (in && in->elements == 0) in = nullptr;
  const Clock::time_point start = Clock::now();
  ExchangeStats stats;
  const TransferShape shape_out{out ? out->elements : 0, options_.elements_per_packet};
  const TransferShape shape_in{in ? in->elements : 0, options_.elements_per_packet};

  // ---- the receiving side
  std::optional<Reassembly> reassembly;
  uint32_t in_needed = 0;
  bool in_done = true;
  PacketHeader in_header;
  if (in) {
    MT_CHECK(endpoint_->has_peer(in->peer), "DLCP: no address known for rank ", in->peer);
    Peer& from = peer(in->peer);
    const TransferId id{job_, static_cast<uint16_t>(in->peer), in->iteration, from.next_recv++};
    reassembly.emplace(shape_in, id, in->values, in->counts, in->mode);
    in_needed = reassembly->packets() - allowed_missing(reassembly->packets(), loss_bound);
    in_done = false;
    in_header.iteration = id.iteration;
    in_header.transfer = id.transfer;
    stats.packets_expected = reassembly->packets();
  }
  int acks_owed = 0;
  Clock::time_point last_ack = start, last_heard_in = start;
  // The deadline runs from the transfer's first packet: a sender that starts late (still busy
  // with its previous step) does not have its burst cut short.
  std::optional<Clock::time_point> first_arrival;

  // ---- the sending side
  struct Slot {
    Clock::time_point sent_at{};
    uint64_t seq = 0;
    uint16_t transmissions = 0;
    bool acked = false, in_flight = false, lost = false;
    int path = 0;
  };
  std::vector<Slot> slots(shape_out.packets());
  std::vector<uint32_t> order(slots.size());
  std::iota(order.begin(), order.end(), 0u);
  if (out && !out->priority.empty()) {
    MT_CHECK(out->priority.size() == slots.size(), "DLCP: ", out->priority.size(), " priorities for ", slots.size(),
             " packets");
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return out->priority[a] > out->priority[b]; });
  }
  PacketHeader out_header;
  Peer* to = nullptr;
  bool out_done = true;
  uint32_t out_allowed = 0;
  if (out) {
    MT_CHECK(endpoint_->has_peer(out->peer), "DLCP: no address known for rank ", out->peer);
    to = &peer(out->peer);
    out_header.job = job_;
    out_header.sender = static_cast<uint16_t>(rank_);
    out_header.iteration = out->iteration;
    out_header.bucket = out->bucket;
    out_header.transfer = to->next_send++;
    out_header.total = shape_out.packets();
    out_allowed = allowed_missing(shape_out.packets(), loss_bound);
    out_done = false;
  }
  const uint64_t decreases_before = to ? to->window.decreases() : 0;
  const int paths = out ? endpoint_->paths_to(out->peer) : 1;
  std::vector<int> flying_on_path(paths, 0);
  std::deque<std::pair<uint32_t, uint64_t>> flight;  // (packet, seq) in sending order; stale entries skipped
  std::deque<uint32_t> resend;
  size_t next_new = 0;
  uint32_t acked = 0, in_flight = 0, lost_outstanding = 0, receiver_has = 0, acked_prefix = 0;
  uint64_t seq = 0, highest_acked_seq = 0;
  bool receiver_done = false, receiver_has_enough = false;
  Clock::time_point enough_at{}, last_sent = start, last_heard_out = start;

  auto transmit = [&](uint32_t i, Clock::time_point now) -> bool {
    int path = 0;
    if (options_.spray == Spray::RoundRobin) {
      path = to->next_path;
    } else {
      path = static_cast<int>(std::min_element(flying_on_path.begin(), flying_on_path.end()) - flying_on_path.begin());
    }
    PacketHeader h = out_header;
    h.index = i;
    h.offset = shape_out.offset_of(i);
    h.priority = out->priority.empty() ? 0 : out->priority[i];
    h.layer = out->layer.empty() ? 0 : out->layer[i];
    h.contributors = out->contributors.empty() ? 1 : out->contributors[i];
    const auto bytes = encode_data(h, out->values + h.offset, shape_out.count_of(i));
    if (!endpoint_->send(out->peer, path, h, bytes)) return false;
    to->next_path = (to->next_path + 1) % paths;
    Slot& s = slots[i];
    (s.transmissions == 0 ? stats.packets_sent : stats.retransmissions) += 1;
    s.transmissions++;
    s.sent_at = now;
    s.seq = ++seq;
    s.in_flight = true;
    s.path = path;
    ++in_flight;
    ++flying_on_path[path];
    flight.emplace_back(i, s.seq);
    last_sent = now;
    return true;
  };
  auto land = [&](uint32_t i) {  // no longer in flight
    Slot& s = slots[i];
    if (!s.in_flight) return;
    s.in_flight = false;
    --in_flight;
    --flying_on_path[s.path];
  };
  auto mark_lost = [&](uint32_t i, Clock::time_point now) {
    Slot& s = slots[i];
    land(i);
    if (s.lost) return;
    s.lost = true;
    ++lost_outstanding;
    to->window.on_loss(s.sent_at, now);
    resend.push_back(i);
  };
  auto mark_acked = [&](uint32_t i, Clock::time_point now, uint32_t* newly) {
    Slot& s = slots[i];
    if (s.acked) return;
    s.acked = true;
    ++acked;
    ++*newly;
    if (s.lost) s.lost = false, --lost_outstanding;
    if (s.in_flight) {
      if (s.transmissions == 1) to->window.on_rtt_sample(now - s.sent_at);  // Karn: not after a resend
      highest_acked_seq = std::max(highest_acked_seq, s.seq);
    }
    land(i);
  };
  auto on_ack = [&](const Packet& p, Clock::time_point now) {
    const PacketHeader& h = p.header;
    last_heard_out = now;
    if (h.total != slots.size()) return;
    receiver_has = std::max(receiver_has, h.index);
    uint32_t newly = 0;
    const uint32_t base = std::min<uint32_t>(h.offset, slots.size());
    for (; acked_prefix < base; ++acked_prefix) mark_acked(acked_prefix, now, &newly);
    for (uint32_t k = 0; k < h.count && base + k < slots.size(); ++k)
      if (p.bit(k)) mark_acked(base + k, now, &newly);
    to->window.on_acked(newly);
    // Three later packets acknowledged: the earlier one is lost, not late.
    while (!flight.empty()) {
      const auto [i, s] = flight.front();
      if (!slots[i].in_flight || slots[i].seq != s) {
        flight.pop_front();
        continue;
      }
      if (s + kReorderThreshold >= highest_acked_seq) break;
      flight.pop_front();
      mark_lost(i, now);
    }
    if (!receiver_has_enough && receiver_has >= slots.size() - out_allowed) receiver_has_enough = true, enough_at = now;
    if (h.flags & kAckDone) receiver_done = true;
  };

  auto finish_in = [&]() {
    in_done = true;
    if (!reassembly->complete()) {
      if (in->mode == WriteMode::Overwrite) reassembly->zero_missing();
      ++stats.deadline_endings;
    }
    stats.packets_received = reassembly->received();
    stats.packets_missing = reassembly->packets() - reassembly->received();
    Peer& from = peer(in->peer);
    from.finished.push_back({in_header.transfer, in_header.iteration, reassembly->arrived_all(), reassembly->received()});
    if (from.finished.size() > kFinishedKept) from.finished.pop_front();
    // Three copies of the final ack: a sender that misses all three probes and gets it again.
    for (int copy = 0; copy < 3; ++copy)
      send_ack(in->peer, in_header, reassembly->arrived_all(), reassembly->received(), true);
  };

  auto keep_early = [&](int from, const std::vector<uint8_t>& bytes) {
    Peer& p = peer(from);
    if (p.early.size() >= kEarlyLimit) {
      ++stats.rejected.dropped_early;
      return;
    }
    p.early.push_back(bytes);
  };

  auto handle = [&](const std::vector<uint8_t>& bytes, int from, Clock::time_point now) {
    Packet p;
    const ParseResult r = parse_packet(bytes.data(), bytes.size(), &p);
    if (r != ParseResult::Ok) {
      stats.rejected.count(r);
      return;
    }
    const PacketHeader& h = p.header;
    // The sender field must be the rank whose address sent it, of this job.
    if (from < 0 || h.sender != from || h.job != job_) {
      ++stats.rejected.foreign;
      return;
    }
    if (h.kind == PacketKind::Ack && (h.flags & kAckProbe)) {
      if (in && !in_done && from == in->peer && h.transfer == in_header.transfer) {
        last_heard_in = now;
        send_ack(from, in_header, reassembly->arrived_all(), reassembly->received(), false);
      } else if (h.transfer < peer(from).next_recv) {
        answer_finished(from, p, &stats.rejected);
      }
      return;
    }
    if (h.kind == PacketKind::Ack) {
      if (out && !out_done && from == out->peer && h.transfer == out_header.transfer &&
          h.iteration == out_header.iteration)
        on_ack(p, now);
      return;  // acks of other transfers: finished ones, nothing to do
    }
    Peer& src = peer(from);
    if (in && !in_done && from == in->peer) {
      const Accepted a = reassembly->accept(p, &stats.rejected);
      if (a == Accepted::Written || a == Accepted::Duplicate) {
        last_heard_in = now;
        ++acks_owed;
        if (!first_arrival) first_arrival = now;
      } else if (a == Accepted::Early) {
        keep_early(from, bytes);
      } else if (a == Accepted::Stale) {
        --stats.rejected.stale;  // counted again (or as a late copy) by answer_finished
        answer_finished(from, p, &stats.rejected);
      }
      return;
    }
    if (h.transfer >= src.next_recv) {
      keep_early(from, bytes);
    } else {
      answer_finished(from, p, &stats.rejected);
    }
  };

  // Packets that came early for this transfer, while the last exchange ran.
  if (in) {
    std::deque<std::vector<uint8_t>> early;
    early.swap(peer(in->peer).early);
    for (const auto& bytes : early) handle(bytes, in->peer, start);
  }

  std::vector<uint8_t> buffer;
  while (true) {
    Clock::time_point now = Clock::now();
    if (!in_done && (reassembly->complete() || (reassembly->received() >= in_needed && first_arrival &&
                                                  now - *first_arrival >= options_.deadline)))
      finish_in();
    if (!out_done) {
      // Packets that waited a retransmission timeout are lost.
      const auto rto = to->window.retransmit_timeout();
      while (!flight.empty()) {
        const auto [i, s] = flight.front();
        if (!slots[i].in_flight || slots[i].seq != s) {
          flight.pop_front();
          continue;
        }
        if (now - slots[i].sent_at < rto) break;
        flight.pop_front();
        mark_lost(i, now);
      }
      while (in_flight < to->window.window()) {
        int64_t pick = -1;
        bool fresh = false;
        // Resend only the losses beyond what the receiver may miss.
        while (!resend.empty() && lost_outstanding > out_allowed) {
          const uint32_t i = resend.front();
          resend.pop_front();
          if (slots[i].acked || !slots[i].lost) continue;
          pick = i;
          break;
        }
        if (pick < 0 && next_new < order.size()) pick = order[next_new], fresh = true;
        if (pick < 0) break;
        const uint32_t i = static_cast<uint32_t>(pick);
        const bool was_lost = slots[i].lost;
        if (was_lost) slots[i].lost = false, --lost_outstanding;
        if (!transmit(i, now)) {
          if (was_lost) slots[i].lost = true, ++lost_outstanding, resend.push_front(i);
          break;
        }
        if (fresh) ++next_new;
      }
      if (receiver_done || acked == slots.size()) {
        out_done = true;
      } else if (receiver_has_enough && next_new == order.size() && now - enough_at >= options_.deadline + rto) {
        out_done = true;  // it has (1 - p) and stops at its deadline by itself
      } else if (next_new == order.size() && now - last_sent >= std::max<Clock::duration>(rto, std::chrono::milliseconds(5))) {
        // Idle: ask the receiver for its state.
        PacketHeader probe = out_header;
        probe.kind = PacketKind::Ack;
        probe.flags = kAckProbe;
        endpoint_->send(out->peer, 0, probe, encode_ack(probe, {}));
        ++stats.probes;
        last_sent = now;
      }
    }
    if (in_done && out_done) break;
    if (!in_done && now - last_heard_in > options_.timeout)
      MT_FAIL("DLCP: rank ", rank_, " received ", reassembly->received(), " of ", reassembly->packets(),
              " packets of iteration ", in->iteration, " and then nothing for ", ms(now - last_heard_in) / 1000,
              " s from ", endpoint_->describe_peer(in->peer), " (dist.timeout_seconds); that rank died, hangs, or "
              "its packets cannot reach this host");
    if (!out_done && now - last_heard_out > options_.timeout)
      MT_FAIL("DLCP: rank ", rank_, " sent ", slots.size(), " packets of iteration ", out->iteration, " to ",
              endpoint_->describe_peer(out->peer), " and heard no acknowledgement for ",
              ms(now - last_heard_out) / 1000, " s (dist.timeout_seconds); that rank died, hangs, or this host's "
              "packets cannot reach it");
    // Wait a little for packets, then drain what is queued.
    int from = -1;
    if (endpoint_->receive(&buffer, &from, kTick)) {
      handle(buffer, from, Clock::now());
      for (int k = 0; k < 256 && endpoint_->receive(&buffer, &from, std::chrono::microseconds(0)); ++k)
        handle(buffer, from, Clock::now());
    } else {
      endpoint_->flush_held();
    }
    now = Clock::now();
    if (!in_done && acks_owed > 0 &&
        (acks_owed >= options_.ack_every || now - last_ack >= std::chrono::milliseconds(1) || reassembly->complete())) {
      if (!reassembly->complete()) send_ack(in->peer, in_header, reassembly->arrived_all(), reassembly->received(), false);
      acks_owed = 0;
      last_ack = now;
    }
  }
  if (out) {
    stats.window_decreases = to->window.decreases() - decreases_before;
    for (uint32_t i = 0; i < slots.size(); ++i)
      if (!slots[i].acked) stats.unacknowledged.push_back(i);
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace mt::dist::dlcp
