#include "dist/dlcp/transport.h"

#include <algorithm>
#include <array>
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
constexpr int kAckEvery = 8;               // packets received per plain ack (or 1 ms)
constexpr double kInitialWindow = 16;      // packets, per peer
// Datagrams read before acknowledging: every packet already queued (up to the largest window),
// so that the answer to a probe covers every packet that arrived before the probe.
constexpr int kDrainLimit = 4096;
constexpr auto kTick = std::chrono::microseconds(500);
// Unanswered probe rounds double the wait before the next, up to this factor: a receiver still
// busy elsewhere is not flooded with probes, and one that comes back is asked again soon.
constexpr int kMaxProbeBackoffShift = 3;
// Acks and probes go first at a switch with priority queues: they are small, and every sender
// waits on them (in the lowest class, a hotspot in a higher band starves them).
constexpr uint8_t kControlClass = kPriorityClasses - 1;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The packets a transfer may miss: none when lossless, else the caller's budget or p of its own.
uint32_t may_miss(const std::optional<uint32_t>& given, uint32_t packets, double loss_bound) {
  return loss_bound > 0 ? std::min(packets, given.value_or(allowed_missing(packets, loss_bound))) : 0;
}

}  // namespace

Spray spray_from(const std::string& name) {
  if (name == "round_robin") return Spray::RoundRobin;
  if (name == "least_loaded") return Spray::LeastLoaded;
  MT_FAIL("unknown dist.dlcp.spray \"", name, "\"; valid names are: round_robin, least_loaded");
}

uint32_t allowed_missing(uint32_t packets, double loss_bound) {
  return static_cast<uint32_t>(std::floor(loss_bound * packets + 1e-9));
}

uint32_t LossBudget::packets(uint32_t weight) const {
  const double left = bound - double(spent);
  return left <= 0 ? 0 : static_cast<uint32_t>(std::floor(left / weight + 1e-9));
}

void ExchangeStats::add(const ExchangeStats& o) {
  using S = ExchangeStats;
  for (auto field : {&S::packets_sent, &S::retransmissions, &S::probes, &S::packets_expected, &S::packets_received,
                     &S::packets_missing, &S::deadline_endings, &S::window_decreases, &S::contributions,
                     &S::contributions_lost})
    this->*field += o.*field;
  using C = PacketCounters;
  for (auto field : {&C::truncated, &C::foreign, &C::malformed, &C::stale, &C::out_of_range, &C::duplicate,
                     &C::dropped_early})
    rejected.*field += o.rejected.*field;
  seconds += o.seconds;
}

Transport::Transport(std::shared_ptr<DatagramEndpoint> endpoint, int rank, uint32_t job, ExchangeOptions options)
    : endpoint_(std::move(endpoint)), rank_(rank), job_(job), options_(options) {
  MT_CHECK(endpoint_ != nullptr, "DLCP transport needs an endpoint");
  MT_CHECK(options_.loss_bound >= 0 && options_.loss_bound < 1, "dist.dlcp.loss_bound must be in [0, 1) (got ",
           options_.loss_bound, ")");
  MT_CHECK(options_.elements_per_packet >= 1 && options_.elements_per_packet <= kMaxElementsPerPacket,
           "DLCP: ", options_.elements_per_packet, " elements per packet is outside 1..", kMaxElementsPerPacket);
}

Transport::Peer& Transport::peer(int rank) {
  auto it = peers_.find(rank);
  if (it == peers_.end()) {
    it = peers_.emplace(rank, Peer{}).first;
    it->second.window = CongestionWindow(kInitialWindow);
  }
  return it->second;
}

void Transport::send_ack(int to, const PacketHeader& of, const std::vector<bool>& arrived, uint32_t received,
                         bool done, int path, uint16_t answers_probe) {
  PacketHeader h;
  h.kind = PacketKind::Ack;
  h.priority = kControlClass;
  h.job = job_;
  h.sender = static_cast<uint16_t>(rank_);
  h.iteration = of.iteration;
  h.transfer = of.transfer;
  h.bucket = of.bucket;
  h.flags = done ? kAckDone : 0;
  h.total = static_cast<uint32_t>(arrived.size());
  h.index = received;
  h.contributors = answers_probe;
  const uint32_t base =
      static_cast<uint32_t>(std::find(arrived.begin(), arrived.end(), false) - arrived.begin());
  h.offset = base;
  std::vector<bool> bits;
  for (size_t i = base; i < arrived.size() && bits.size() < kAckBits; ++i) bits.push_back(arrived[i]);
  const auto bytes = encode_ack(h, bits);
  // A full socket buffer loses this one (the next ack or the sender's probe recovers).
  endpoint_->send(to, path, h, bytes);
}

void Transport::answer_finished(int from, int path, const Packet& p, PacketCounters* counters) {
  for (const Finished& f : peer(from).finished) {
    if (f.transfer != p.header.transfer) continue;
    if (f.iteration != p.header.iteration || p.header.total != f.arrived.size()) break;  // not that transfer's
    send_ack(from, p.header, f.arrived, f.received, /*done=*/true, path);
    if (p.header.kind == PacketKind::Data) ++counters->duplicate;  // a late copy, written nowhere
    return;
  }
  if (p.header.kind == PacketKind::Data) ++counters->stale;
}

// ---- One outgoing transfer: priority order, window, loss detection, resends beyond p, probes.
struct Transport::Sending {
  struct Slot {
    Clock::time_point sent_at{};
    uint64_t seq = 0;
    uint16_t transmissions = 0;
    bool acked = false, in_flight = false, lost = false;
    int path = 0;
  };
  const OutgoingTransfer* out;
  Transport* transport;
  ExchangeStats* stats;
  Peer* to;
  TransferShape shape;
  PacketHeader header;
  std::vector<Slot> slots;
  std::vector<uint32_t> order;  // packet indices, highest class first
  uint32_t allowed = 0;         // packets the receiver may miss
  int paths = 1;
  std::vector<int> flying_on_path;
  std::deque<std::pair<uint32_t, uint64_t>> flight;  // (packet, seq) in sending order; stale entries skipped
  std::deque<uint32_t> resend;
  size_t next_new = 0;
  uint32_t acked = 0, in_flight = 0, lost_outstanding = 0, receiver_has = 0, acked_prefix = 0;
  uint64_t seq = 0, highest_acked_seq = 0, decreases_before = 0;
  bool done = false, receiver_done = false, receiver_has_enough = false;
  Clock::time_point enough_at{}, last_sent{}, last_heard{};
  // When the receiver first answered for this transfer: packets sent before waited for it to
  // enter its exchange, so their wait is no round-trip sample.
  std::optional<Clock::time_point> first_answer;
  // The last few probes: number, its path, the packets sent before it, and when a packet must
  // have been sent to have been overdue when it left.
  struct Probe {
    uint16_t number = 0;
    uint64_t last_seq = 0;
    int path = 0;
    Clock::time_point overdue_before{};
  };
  std::array<Probe, 16> probes{};
  uint16_t probes_sent = 0;
  Clock::time_point last_probe{};
  int unanswered_rounds = 0;  // probe rounds since the last ack: the backoff

  Sending(const OutgoingTransfer* o, Transport* t, ExchangeStats* s, double loss_bound, Clock::time_point start)
      : out(o), transport(t), stats(s), to(&t->peer(o->peer)),
        shape{o->elements, t->options_.elements_per_packet}, slots(shape.packets()), order(slots.size()),
        last_sent(start), last_heard(start) {
    std::iota(order.begin(), order.end(), 0u);
    if (!out->priority.empty()) {
      MT_CHECK(out->priority.size() == slots.size(), "DLCP: ", out->priority.size(), " priorities for ", slots.size(),
               " packets");
      std::stable_sort(order.begin(), order.end(),
                       [&](uint32_t a, uint32_t b) { return out->priority[a] > out->priority[b]; });
    }
    header.job = t->job_;
    header.sender = static_cast<uint16_t>(t->rank_);
    header.iteration = out->iteration;
    header.bucket = out->bucket;
    header.transfer = to->next_send++;
    header.total = shape.packets();
    allowed = may_miss(out->may_miss, shape.packets(), loss_bound);
    paths = t->endpoint_->paths_to(out->peer);
    if (to->paths.size() != paths) to->paths = PathSet(paths);
    flying_on_path.assign(static_cast<size_t>(paths), 0);
    decreases_before = to->window.decreases();
  }

  // The path for a first transmission: in turn, or the least loaded, among the usable paths.
  int spray_path(Clock::time_point now) const {
    if (transport->options_.spray == Spray::RoundRobin) return to->paths.next_usable(to->next_path, now);
    int best = -1;
    auto flying = [&](int path) { return flying_on_path[static_cast<size_t>(path)]; };
    for (int path = 0; path < paths; ++path)
      if (to->paths.usable(path, now) && (best < 0 || flying(path) < flying(best))) best = path;
    return best < 0 ? 0 : best;  // some path is always usable
  }
  bool transmit(uint32_t i, int path, Clock::time_point now) {
    PacketHeader h = header;
    h.index = i;
    h.offset = shape.offset_of(i);
    h.priority = out->priority.empty() ? 0 : out->priority[i];
    h.layer = out->layer.empty() ? 0 : out->layer[i];
    h.contributors = out->contributors.empty() ? 1 : out->contributors[i];
    const auto bytes = encode_data(h, out->values + h.offset, shape.count_of(i));
    if (!transport->endpoint_->send(out->peer, path, h, bytes)) return false;
    to->next_path = (path + 1) % paths;
    Slot& s = slots[i];
    (s.transmissions == 0 ? stats->packets_sent : stats->retransmissions) += 1;
    s.transmissions++;
    s.sent_at = now;
    s.seq = ++seq;
    s.in_flight = true;
    s.path = path;
    ++in_flight;
    ++flying_on_path[static_cast<size_t>(path)];
    flight.emplace_back(i, s.seq);
    last_sent = now;
    return true;
  }
  // Whether a flight entry is the packet's latest transmission, still unanswered.
  bool current(const std::pair<uint32_t, uint64_t>& entry) const {
    return slots[entry.first].in_flight && slots[entry.first].seq == entry.second;
  }
  void land(uint32_t i) {  // no longer in flight
    Slot& s = slots[i];
    if (!s.in_flight) return;
    s.in_flight = false;
    --in_flight;
    --flying_on_path[static_cast<size_t>(s.path)];
  }
  // `silent`: found by an answer that came on another path than the packet's, while its own
  // path delivered nothing sent after it (a random drop on a working path is not silence).
  void mark_lost(uint32_t i, Clock::time_point now, bool silent = false) {
    Slot& s = slots[i];
    land(i);
    if (s.lost) return;
    s.lost = true;
    ++lost_outstanding;
    to->window.on_loss(s.sent_at, now);
    to->paths[s.path].on_lost(silent, now);
    resend.push_back(i);
  }
  void mark_acked(uint32_t i, Clock::time_point now, uint32_t* newly) {
    Slot& s = slots[i];
    if (s.acked) return;
    s.acked = true;
    ++acked;
    ++*newly;
    to->paths[s.path].on_reached(s.sent_at);
    if (s.lost) s.lost = false, --lost_outstanding;
    if (s.in_flight) {
      // Karn: no round-trip sample after a resend. Nor for a packet sent before the receiver
      // first answered: its wait measured the receiver's lateness, not the path.
      const bool sample = s.transmissions == 1 && s.sent_at >= *first_answer;
      to->paths[s.path].on_delivered(sample ? now - s.sent_at : Clock::duration::zero());
      highest_acked_seq = std::max(highest_acked_seq, s.seq);
    }
    land(i);
  }
  void on_ack(const Packet& p, Clock::time_point now) {
    const PacketHeader& h = p.header;
    last_heard = now;
    if (h.total != slots.size()) return;
    if (!first_answer) first_answer = now;
    unanswered_rounds = 0;
    receiver_has = std::max(receiver_has, h.index);
    uint32_t newly = 0;
    const uint32_t base = std::min<uint32_t>(h.offset, static_cast<uint32_t>(slots.size()));
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
    // The answer to a probe: what was sent before it on its path and is not here is lost (the
    // path delivers in order); so is what waited a retransmission timeout on another path by the
    // time the probe left (that path is slower than this one by more than that: a resend on
    // another path gets there sooner than the packet would).
    const Probe& answered = probes[h.contributors % probes.size()];
    if (h.contributors != 0 && answered.number == h.contributors) {
      std::vector<std::pair<uint32_t, bool>> lost;  // (packet, found from another path)
      for (const auto& [i, s] : flight) {
        if (s > answered.last_seq) break;
        if (!current({i, s})) continue;
        if (slots[i].path == answered.path)
          lost.emplace_back(i, false);
        else if (slots[i].sent_at <= answered.overdue_before)
          lost.emplace_back(i, !to->paths[slots[i].path].reached_after(slots[i].sent_at));
      }
      for (const auto& [i, silent] : lost) mark_lost(i, now, silent);
    }
    if (!receiver_has_enough && receiver_has >= slots.size() - allowed) receiver_has_enough = true, enough_at = now;
    if (h.flags & kAckDone) receiver_done = true;
  }
  // One probe on every path: the first answer, from the fastest path that still works, settles
  // what is lost (a probe on the timed-out packet's path alone would wait behind its hotspot).
  void probe_round(Clock::time_point now, Clock::duration timeout) {
    for (int path = 0; path < paths; ++path) {
      if (++probes_sent == 0) probes_sent = 1;  // 0 means "no probe" in an ack
      probes[probes_sent % probes.size()] = {probes_sent, seq, path, now - timeout};
      PacketHeader h = header;
      h.kind = PacketKind::Ack;
      h.flags = kAckProbe;
      h.priority = kControlClass;
      h.contributors = probes_sent;
      transport->endpoint_->send(out->peer, path, h, encode_ack(h, {}));
      ++stats->probes;
    }
    last_probe = now;
    ++unanswered_rounds;
  }
  // The window's worth of (re)transmissions, the end, or a probe.
  void pump(Clock::time_point now) {
    const auto rto = to->paths.retransmit_timeout(now);
    while (!flight.empty() && !current(flight.front())) flight.pop_front();
    while (in_flight < to->window.window()) {
      int64_t pick = -1;
      bool fresh = false;
      // Resend only the losses beyond what the receiver may miss.
      while (!resend.empty() && lost_outstanding > allowed) {
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
      const int path = fresh ? spray_path(now) : to->paths.for_resend(slots[i].path, now);
      if (was_lost) slots[i].lost = false, --lost_outstanding;
      if (!transmit(i, path, now)) {
        if (was_lost) slots[i].lost = true, ++lost_outstanding, resend.push_front(i);
        break;
      }
      if (fresh) ++next_new;
    }
    const auto& options = transport->options_;
    if (receiver_done || acked == slots.size()) {
      done = true;
    } else if (receiver_has_enough && next_new == order.size() && now - enough_at >= options.deadline + rto) {
      done = true;  // it has what it needs and stops at its deadline by itself
    } else if (now - last_probe >= rto * (1 << std::min(unanswered_rounds, kMaxProbeBackoffShift))) {
      // The oldest unacknowledged packet waited a retransmission timeout: probe (the answer
      // settles whether it is lost). Idle with nothing in flight: ask for the state, so that a
      // lost ack or "done" does not hold the sender up.
      if ((!flight.empty() && now - slots[flight.front().first].sent_at >= rto) ||
          (flight.empty() && now - last_sent >= rto))
        probe_round(now, rto);
    }
  }
  std::vector<uint32_t> unacknowledged() const {
    std::vector<uint32_t> missing;
    for (uint32_t i = 0; i < slots.size(); ++i)
      if (!slots[i].acked) missing.push_back(i);
    return missing;
  }
};

// ---- One incoming transfer: packets written at their offsets, acks, the end by the loss rule.
struct Transport::Receiving {
  const IncomingTransfer* in;
  Reassembly reassembly;
  PacketHeader header;  // iteration and transfer, for the acks
  uint32_t needed = 0;  // packets that end it once the deadline passed
  bool done = false;
  int acks_owed = 0;
  // Probes to answer after reading what is queued: (number, the path it came on).
  std::vector<std::pair<uint16_t, int>> probes_owed;
  int next_ack_path = 0;  // plain acks alternate over the paths
  Clock::time_point last_ack{}, last_heard{};
  // The deadline runs from the transfer's first packet: a sender that starts late (still busy
  // with its previous step) does not have its burst cut short.
  std::optional<Clock::time_point> first_arrival;

  Receiving(const IncomingTransfer* i, Transport* t, double loss_bound, Clock::time_point start)
      : in(i),
        reassembly(TransferShape{i->elements, t->options_.elements_per_packet},
                   TransferId{t->job_, static_cast<uint16_t>(i->peer), i->iteration, t->peer(i->peer).next_recv++},
                   i->values, i->counts, i->mode),
        last_ack(start), last_heard(start) {
    reassembly.record_tags(i->packet_priority, i->packet_layer);
    needed = reassembly.packets() - may_miss(i->may_miss, reassembly.packets(), loss_bound);
    header.iteration = reassembly.id().iteration;
    header.transfer = reassembly.id().transfer;
  }
  bool may_end(Clock::time_point now, std::chrono::milliseconds deadline) const {
    return reassembly.complete() ||
           (reassembly.received() >= needed && first_arrival && now - *first_arrival >= deadline);
  }
};

ExchangeStats Transport::exchange(const OutgoingTransfer* out, const IncomingTransfer* in, bool lossless) {
  std::vector<OutgoingTransfer> outs;
  std::vector<IncomingTransfer> ins;
  if (out) outs.push_back(*out);
  if (in) ins.push_back(*in);
  std::vector<std::vector<uint32_t>> unacknowledged;
  ExchangeStats stats = exchange_all(outs, ins, lossless, &unacknowledged);
  if (!unacknowledged.empty()) stats.unacknowledged = std::move(unacknowledged.front());
  return stats;
}

ExchangeStats Transport::exchange_all(const std::vector<OutgoingTransfer>& outs,
                                      const std::vector<IncomingTransfer>& ins, bool lossless,
                                      std::vector<std::vector<uint32_t>>* unacknowledged) {
  const double loss_bound = lossless ? 0.0 : options_.loss_bound;
  const Clock::time_point start = Clock::now();
  ExchangeStats stats;

  // Transfers of 0 elements carry nothing (both ends skip them alike).
  std::vector<Receiving> receiving;
  std::map<int, size_t> receiving_from;  // peer -> index in receiving
  receiving.reserve(ins.size());
  for (const IncomingTransfer& in : ins) {
    if (in.elements == 0) continue;
    MT_CHECK(endpoint_->has_peer(in.peer), "DLCP: no address known for rank ", in.peer);
    MT_CHECK(receiving_from.emplace(in.peer, receiving.size()).second, "DLCP: two incoming transfers from rank ",
             in.peer, " in one exchange");
    receiving.emplace_back(&in, this, loss_bound, start);
    stats.packets_expected += receiving.back().reassembly.packets();
  }
  std::vector<Sending> sending;
  std::vector<size_t> sending_index(outs.size(), SIZE_MAX);  // outs[k] -> index in sending
  std::map<int, size_t> sending_to;
  sending.reserve(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    if (outs[k].elements == 0) continue;
    MT_CHECK(endpoint_->has_peer(outs[k].peer), "DLCP: no address known for rank ", outs[k].peer);
    MT_CHECK(sending_to.emplace(outs[k].peer, sending.size()).second, "DLCP: two outgoing transfers to rank ",
             outs[k].peer, " in one exchange");
    sending_index[k] = sending.size();
    sending.emplace_back(&outs[k], this, &stats, loss_bound, start);
  }

  auto finish_in = [&](Receiving& r) {
    r.done = true;
    if (!r.reassembly.complete()) {
      if (r.in->mode == WriteMode::Overwrite) r.reassembly.zero_missing();
      ++stats.deadline_endings;
    }
    stats.packets_received += r.reassembly.received();
    stats.packets_missing += r.reassembly.packets() - r.reassembly.received();
    stats.contributions += r.reassembly.packets();
    stats.contributions_lost += r.reassembly.packets() - r.reassembly.received();
    Peer& from = peer(r.in->peer);
    from.finished.push_back({r.header.transfer, r.header.iteration, r.reassembly.arrived_all(), r.reassembly.received()});
    if (from.finished.size() > kFinishedKept) from.finished.pop_front();
    // Three copies of the final ack, over the paths in turn: a sender that misses all three
    // probes and gets it again.
    const int paths = endpoint_->paths_to(r.in->peer);
    for (int copy = 0; copy < 3; ++copy)
      send_ack(r.in->peer, r.header, r.reassembly.arrived_all(), r.reassembly.received(), true, copy % paths);
  };

  auto keep_early = [&](int from, const std::vector<uint8_t>& bytes) {
    Peer& p = peer(from);
    if (p.early.size() >= kEarlyLimit) {
      ++stats.rejected.dropped_early;
      return;
    }
    p.early.push_back(bytes);
  };

  auto handle = [&](const std::vector<uint8_t>& bytes, int from, int path, Clock::time_point now) {
    Packet p;
    const ParseResult result = parse_packet(bytes.data(), bytes.size(), &p);
    if (result != ParseResult::Ok) {
      stats.rejected.count(result);
      return;
    }
    const PacketHeader& h = p.header;
    // The sender field must be the rank whose address sent it, of this job.
    if (from < 0 || h.sender != from || h.job != job_) {
      ++stats.rejected.foreign;
      return;
    }
    const auto in_it = receiving_from.find(from);
    Receiving* r = in_it == receiving_from.end() || receiving[in_it->second].done ? nullptr : &receiving[in_it->second];
    if (h.kind == PacketKind::Ack && (h.flags & kAckProbe)) {
      if (r && h.transfer == r->header.transfer) {
        r->last_heard = now;
        r->probes_owed.emplace_back(h.contributors == 0 ? 1 : h.contributors, path);
      } else if (h.transfer < peer(from).next_recv) {
        answer_finished(from, path, p, &stats.rejected);
      }
      return;
    }
    if (h.kind == PacketKind::Ack) {
      const auto out_it = sending_to.find(from);
      if (out_it == sending_to.end()) return;  // acks of finished transfers: nothing to do
      Sending& s = sending[out_it->second];
      if (!s.done && h.transfer == s.header.transfer && h.iteration == s.header.iteration) s.on_ack(p, now);
      return;
    }
    if (r) {
      const Accepted a = r->reassembly.accept(p, &stats.rejected);
      if (a == Accepted::Written || a == Accepted::Duplicate) {
        r->last_heard = now;
        ++r->acks_owed;
        if (!r->first_arrival) r->first_arrival = now;
      } else if (a == Accepted::Early) {
        keep_early(from, bytes);
      } else if (a == Accepted::Stale) {
        --stats.rejected.stale;  // counted again (or as a late copy) by answer_finished
        answer_finished(from, path, p, &stats.rejected);
      }
      return;
    }
    if (h.transfer >= peer(from).next_recv) {
      keep_early(from, bytes);
    } else {
      answer_finished(from, path, p, &stats.rejected);
    }
  };

  // Packets that came early for these transfers, while the last exchange ran.
  for (Receiving& r : receiving) {
    std::deque<std::vector<uint8_t>> early;
    early.swap(peer(r.in->peer).early);
    for (const auto& bytes : early) handle(bytes, r.in->peer, 0, start);
  }

  std::vector<uint8_t> buffer;
  while (true) {
    Clock::time_point now = Clock::now();
    bool all_done = true;
    for (Receiving& r : receiving) {
      if (!r.done && r.may_end(now, options_.deadline)) finish_in(r);
      all_done = all_done && r.done;
    }
    for (Sending& s : sending) {
      if (!s.done) s.pump(now);
      all_done = all_done && s.done;
    }
    if (all_done) break;
    for (const Receiving& r : receiving) {
      if (r.done || now - r.last_heard <= options_.timeout) continue;
      MT_FAIL("DLCP: rank ", rank_, " received ", r.reassembly.received(), " of ", r.reassembly.packets(),
              " packets of iteration ", r.in->iteration, " and then nothing for ", ms(now - r.last_heard) / 1000,
              " s from ", endpoint_->describe_peer(r.in->peer), " (dist.timeout_seconds); that rank died, hangs, or "
              "its packets cannot reach this host");
    }
    for (const Sending& s : sending) {
      if (s.done || now - s.last_heard <= options_.timeout) continue;
      MT_FAIL("DLCP: rank ", rank_, " sent ", s.slots.size(), " packets of iteration ", s.out->iteration, " to ",
              endpoint_->describe_peer(s.out->peer), " and heard no acknowledgement for ", ms(now - s.last_heard) / 1000,
              " s (dist.timeout_seconds); that rank died, hangs, or this host's packets cannot reach it");
    }
    // Wait a little for packets, then drain what is queued.
    int from = -1, path = 0;
    if (endpoint_->receive(&buffer, &from, kTick, &path)) {
      handle(buffer, from, path, Clock::now());
      for (int k = 0; k < kDrainLimit && endpoint_->receive(&buffer, &from, std::chrono::microseconds(0), &path); ++k)
        handle(buffer, from, path, Clock::now());
    } else {
      endpoint_->flush_held();
    }
    now = Clock::now();
    for (Receiving& r : receiving) {
      if (r.done || (r.acks_owed == 0 && r.probes_owed.empty())) continue;
      if (!r.probes_owed.empty() || r.acks_owed >= kAckEvery ||
          now - r.last_ack >= std::chrono::milliseconds(1) || r.reassembly.complete()) {
        // A complete transfer's "done" acks follow at the top of the loop.
        if (!r.reassembly.complete()) {
          // Each probe is answered on the path it came on (the sender learns which paths work);
          // a plain ack takes the paths in turn.
          for (const auto& [number, on] : r.probes_owed)
            send_ack(r.in->peer, r.header, r.reassembly.arrived_all(), r.reassembly.received(), false, on, number);
          if (r.probes_owed.empty()) {
            send_ack(r.in->peer, r.header, r.reassembly.arrived_all(), r.reassembly.received(), false,
                     r.next_ack_path, 0);
            r.next_ack_path = (r.next_ack_path + 1) % endpoint_->paths_to(r.in->peer);
          }
        }
        r.acks_owed = 0;
        r.probes_owed.clear();
        r.last_ack = now;
      }
    }
  }
  for (const Sending& s : sending) stats.window_decreases += s.to->window.decreases() - s.decreases_before;
  if (unacknowledged) {
    unacknowledged->assign(outs.size(), {});
    for (size_t k = 0; k < outs.size(); ++k)
      if (sending_index[k] != SIZE_MAX) (*unacknowledged)[k] = sending[sending_index[k]].unacknowledged();
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace mt::dist::dlcp
