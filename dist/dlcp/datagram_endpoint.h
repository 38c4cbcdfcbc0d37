// DLCP's network end: one non-blocking UDP socket per local source address (a path), and the
// addresses of every peer's sockets. A packet to a peer goes out on one path, chosen per packet
// by the caller (spraying: order does not matter to the receiver), with its priority class in
// the IP header's DSCP field (IP_TOS, set on the socket when the class changes). On loopback
// 127.0.0.1, 127.0.0.2, ... are distinct paths; on a host with two interfaces, their addresses.
// Optional faults on purpose drop, duplicate or reorder packets before they leave.
#pragma once
#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/dlcp/packet.h"

namespace mt::dist::dlcp {

// What happens to a packet before it leaves.
enum class FaultAction { Deliver, Drop, Duplicate, HoldBack };
// Faults on purpose, asked about each packet before it leaves: dist.dlcp.inject_loss drops a
// fraction of the data packets; the tests plant drops, duplicates and reordering.
class PacketFaults {
 public:
  virtual ~PacketFaults() = default;
  virtual FaultAction decide(const PacketHeader& header, int path) = 0;
};
// dist.dlcp.inject_loss: `fraction` of the data packets dropped, drawn from a stream seeded by
// `seed`; acknowledgements pass.
std::shared_ptr<PacketFaults> random_loss(double fraction, uint64_t seed);

struct PathAddress {
  std::string host;  // IPv4, dotted
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "1.2.3.4:5,1.2.3.5:6" and back (how addresses travel to the peers).
std::string format_paths(const std::vector<PathAddress>& paths);
std::vector<PathAddress> parse_paths(const std::string& text);

// A path as written in dist.dlcp.paths, as the local IPv4 address to bind: an address stays as
// it is; anything else names a network interface of this host ("eth1"), so that every host of
// a job can run the same config (each host's eth1 has its own address). An interface without an
// IPv4 address is an Error naming it and listing the interfaces that have one.
std::string path_address(const std::string& path);

struct PathCounters {
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

class DatagramEndpoint {
 public:
  // Binds a socket to each address (port 0: the kernel picks). Errors name the address.
  explicit DatagramEndpoint(const std::vector<std::string>& local_addresses,
                            int receive_buffer_bytes = 8 << 20);
  ~DatagramEndpoint();
  DatagramEndpoint(const DatagramEndpoint&) = delete;
  DatagramEndpoint& operator=(const DatagramEndpoint&) = delete;

  std::vector<PathAddress> local_paths() const { return local_; }
  void add_peer(int rank, std::vector<PathAddress> addresses);
  bool has_peer(int rank) const { return peers_.count(rank) > 0; }
  std::string describe_peer(int rank) const;  // "rank 2 at 127.0.0.1:4000,127.0.0.2:4001"
  // What errors call the peer instead of "rank 2" (e.g. "parameter server 0 (rank 2)").
  void set_peer_name(int rank, std::string name) { peer_name_[rank] = std::move(name); }
  // Paths to `rank`: path p pairs local socket p mod L with the peer's address p mod P.
  int paths_to(int rank) const;

  // Sends one encoded packet to `rank` on `path`, its DSCP from header.priority. False when the
  // socket's buffer is full (nothing was sent; try again after receiving).
  bool send(int rank, int path, const PacketHeader& header, const std::vector<uint8_t>& bytes);
  // Waits up to `timeout` for one datagram on any socket. Returns false on timeout; else the
  // bytes, the rank whose address sent them (-1: no known peer) and, if `path` is given, the
  // index of the local socket that received it (answers go back on the path they came on).
  bool receive(std::vector<uint8_t>* bytes, int* from_rank, std::chrono::microseconds timeout, int* path = nullptr);

  // Sends the packets the fault injector held back (the sender calls it when it goes idle, so a
  // reordered packet is late, not lost).
  void flush_held();
  void set_fault_injector(std::shared_ptr<PacketFaults> injector) { injector_ = std::move(injector); }
  const std::vector<PathCounters>& sent_per_path() const { return sent_; }  // by local socket

 private:
  bool send_now(int rank, int path, uint8_t priority, const std::vector<uint8_t>& bytes);
  int receive_from(int fd, std::vector<uint8_t>* bytes);

  std::vector<int> fds_;
  std::vector<PathAddress> local_;
  std::vector<int> tos_;  // the TOS byte each socket has now
  std::map<int, std::vector<sockaddr_in>> peers_;
  std::map<int, std::vector<PathAddress>> peer_text_;
  std::map<int, std::string> peer_name_;
  std::vector<PathCounters> sent_;
  std::shared_ptr<PacketFaults> injector_;
  struct Held {
    int rank, path;
    uint8_t priority;
    std::vector<uint8_t> bytes;
  };
  std::vector<Held> held_;  // reordered: sent after the next packet
  size_t next_fd_ = 0;      // receive fairness across sockets
};

}  // namespace mt::dist::dlcp
