// DLCP's bounded-loss exchange (README.md): one buffer sent and one received per exchange (a ring
// step), or several to and from several peers at once (exchange_all). A receiver stops at every
// packet, or once the deadline passed since the transfer's first packet and the packets still
// missing are within what it may miss (floor(p x packets), or what the caller's budget left); a
// sender goes in priority order within a congestion window, sprays over the paths not avoided,
// and takes a packet as lost only from three later acks or from a probe's answer (never from
// silence alone: the receiver may still be computing). Lost packets are resent on another path,
// and only beyond what the receiver may miss. Silence for `timeout` is an Error naming the peer
// and its addresses.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/dlcp/congestion_window.h"
#include "dist/dlcp/datagram_endpoint.h"
#include "dist/dlcp/packet.h"
#include "dist/dlcp/path_health.h"
#include "dist/dlcp/reassembly.h"

namespace mt::dist::dlcp {

enum class Spray { RoundRobin, LeastLoaded };
Spray spray_from(const std::string& name);  // "round_robin" | "least_loaded"

struct ExchangeOptions {
  double loss_bound = 0;                                        // p, in [0, 1)
  std::chrono::milliseconds deadline{20};
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // silence that is an Error
  uint16_t elements_per_packet = 338;                           // (1400 - 48) / 4
  Spray spray = Spray::RoundRobin;
};

// The packets a transfer may lose on its own: floor(p * packets).
uint32_t allowed_missing(uint32_t packets, double loss_bound);

// p's share of one exchange in contributions (one rank's values for one packet's range): a
// packet that carries `weight` of them may be lost only while the spent stays within the bound.
struct LossBudget {
  double bound = 0;  // p x the contributions at stake
  uint64_t spent = 0;
  uint32_t packets(uint32_t weight) const;  // lost packets of this weight still allowed
  void spend(uint64_t packets, uint32_t weight) { spent += packets * weight; }
};

struct OutgoingTransfer {
  int peer = -1;
  uint32_t iteration = 0;
  uint16_t bucket = 0;
  const float* values = nullptr;
  uint32_t elements = 0;
  std::vector<uint16_t> contributors;  // per packet (ranks summed into it); empty = 1
  std::vector<uint8_t> priority;       // per packet; empty = class 0
  std::vector<uint16_t> layer;         // per packet; empty = 0
  std::optional<uint32_t> may_miss;    // packets the receiver may miss; unset: floor(p * packets)
};

struct IncomingTransfer {
  int peer = -1;
  uint32_t iteration = 0;
  float* values = nullptr;
  uint16_t* counts = nullptr;  // optional: contributions per element
  uint32_t elements = 0;
  WriteMode mode = WriteMode::Overwrite;
  // Optional, one entry per packet: the class and layer its sender gave each packet that
  // arrived (left as they were for the others), so a relay can send the packet on with them.
  uint8_t* packet_priority = nullptr;
  uint16_t* packet_layer = nullptr;
  std::optional<uint32_t> may_miss;  // as the sender's; it must not exceed this
};

struct ExchangeStats {
  uint64_t packets_sent = 0;       // first transmissions
  uint64_t retransmissions = 0;
  uint64_t probes = 0;
  uint64_t packets_expected = 0;   // incoming
  uint64_t packets_received = 0;
  uint64_t packets_missing = 0;    // accepted as lost at the deadline
  uint64_t deadline_endings = 0;   // incoming transfers that ended at the deadline, incomplete
  uint64_t window_decreases = 0;
  // The loss p bounds: contributions at stake and lost. A transfer's packet is one contribution
  // (its sender's values); the ring and the parameter-server worker weigh their own.
  uint64_t contributions = 0, contributions_lost = 0;
  double seconds = 0;
  PacketCounters rejected;
  // Outgoing packets the receiver did not get, as far as the sender knows at the end
  // (exchange(); exchange_all reports them per transfer).
  std::vector<uint32_t> unacknowledged;

  double loss() const { return contributions ? double(contributions_lost) / double(contributions) : 0.0; }
  void add(const ExchangeStats& other);  // sums (unacknowledged is not merged)
};

class Transport {
 public:
  Transport(std::shared_ptr<DatagramEndpoint> endpoint, int rank, uint32_t job, ExchangeOptions options);

  // Runs one exchange; either side may be null (or of 0 elements: nothing travels). Both ends
  // of a transfer must call it in the same order for the same sizes. `lossless` makes this
  // exchange wait for every packet (p = 0), whatever the options say; both ends must agree.
  ExchangeStats exchange(const OutgoingTransfer* out, const IncomingTransfer* in, bool lossless = false);
  // Several transfers at once, at most one outgoing and one incoming per peer. `unacknowledged`
  // (optional) gets, per outgoing transfer in the order given, the packets its receiver did not get.
  ExchangeStats exchange_all(const std::vector<OutgoingTransfer>& outs, const std::vector<IncomingTransfer>& ins,
                             bool lossless = false, std::vector<std::vector<uint32_t>>* unacknowledged = nullptr);

  DatagramEndpoint& endpoint() { return *endpoint_; }
  const ExchangeOptions& options() const { return options_; }

 private:
  struct Finished {  // a finished incoming transfer, to answer its late packets
    uint32_t transfer = 0, iteration = 0;
    std::vector<bool> arrived;
    uint32_t received = 0;
  };
  struct Peer {
    uint32_t next_send = 0, next_recv = 0;
    std::deque<std::vector<uint8_t>> early;
    std::deque<Finished> finished;
    CongestionWindow window;
    PathSet paths = PathSet(1);  // sized to the paths to this peer by the first outgoing transfer
    int next_path = 0;  // round-robin spraying
  };
  struct Sending;    // one outgoing transfer's state during an exchange (transport.cpp)
  struct Receiving;  // one incoming transfer's
  Peer& peer(int rank);
  // `answers_probe`: the number of the sender's probe this ack answers (0: none); `path`: the
  // path it goes back on.
  void send_ack(int to, const PacketHeader& base, const std::vector<bool>& arrived, uint32_t received, bool done,
                int path, uint16_t answers_probe = 0);
  // A packet (data, or a probe) of a finished transfer, come on `path`: answered with its final ack.
  void answer_finished(int from, int path, const Packet& p, PacketCounters* counters);

  std::shared_ptr<DatagramEndpoint> endpoint_;
  int rank_;
  uint32_t job_;
  ExchangeOptions options_;
  std::map<int, Peer> peers_;
};

}  // namespace mt::dist::dlcp
