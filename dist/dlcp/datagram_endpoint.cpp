#include "dist/dlcp/datagram_endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/strings.h"
#include "dist/dlcp/priority.h"

namespace mt::dist::dlcp {
namespace {

sockaddr_in to_sockaddr(const PathAddress& a) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(static_cast<uint16_t>(a.port));
  MT_CHECK(::inet_pton(AF_INET, a.host.c_str(), &s.sin_addr) == 1, "DLCP: \"", a.host,
           "\" is not an IPv4 address; give dist.dlcp.paths as dotted IPv4 addresses");
  return s;
}

bool same(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

}  // namespace

std::string format_paths(const std::vector<PathAddress>& paths) {
  std::vector<std::string> texts;
  for (const auto& p : paths) texts.push_back(p.str());
  return core::join(texts, ",");
}

std::vector<PathAddress> parse_paths(const std::string& text) {
  std::vector<PathAddress> out;
  for (const std::string& item : core::split(text, ',')) {
    const size_t colon = item.rfind(':');
    MT_CHECK(colon != std::string::npos && colon > 0, "DLCP: peer address \"", item, "\" is not host:port");
    PathAddress a;
    a.host = item.substr(0, colon);
    try {
      a.port = std::stoi(item.substr(colon + 1));
    } catch (const std::exception&) {
      MT_FAIL("DLCP: peer address \"", item, "\" has no valid port");
    }
    MT_CHECK(a.port > 0 && a.port < 65536, "DLCP: peer address \"", item, "\" has port outside 1..65535");
    out.push_back(a);
  }
  MT_CHECK(!out.empty(), "DLCP: a peer announced no address");
  return out;
}

std::string path_address(const std::string& path) {
  in_addr literal{};
  if (::inet_pton(AF_INET, path.c_str(), &literal) == 1) return path;
  ifaddrs* list = nullptr;
  MT_CHECK(::getifaddrs(&list) == 0, "DLCP: cannot list this host's interfaces: ", std::strerror(errno));
  std::string found, known;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    if (found.empty() && path == i->ifa_name) found = text;
    known += (known.empty() ? "" : ", ") + std::string(i->ifa_name) + " " + text;
  }
  ::freeifaddrs(list);
  MT_CHECK(!found.empty(), "dist.dlcp.paths: \"", path, "\" is neither an IPv4 address nor an interface of this host "
           "with one (interfaces with an IPv4 address: ", known.empty() ? "none" : known, ")");
  return found;
}

DatagramEndpoint::DatagramEndpoint(const std::vector<std::string>& local_addresses, int receive_buffer_bytes) {
  MT_CHECK(!local_addresses.empty(), "DLCP: at least one local address (dist.dlcp.paths) is needed");
  for (const std::string& host : local_addresses) {
    sockaddr_in addr = to_sockaddr({host, 0});
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    MT_CHECK(fd >= 0, "DLCP: cannot open a UDP socket: ", std::strerror(errno));
    fds_.push_back(fd);
    // Large buffers: a window of packets arrives as a burst.
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const std::string why = std::strerror(errno);
      for (int& f : fds_) ::close(f);
      MT_FAIL("DLCP: cannot bind a UDP socket to ", host, " (", why, "); dist.dlcp.paths must list addresses "
              "of this host (on loopback 127.0.0.x)");
    }
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    local_.push_back({host, ntohs(bound.sin_port)});
    tos_.push_back(-1);
  }
  sent_.resize(fds_.size());
}

DatagramEndpoint::~DatagramEndpoint() {
  for (int fd : fds_) ::close(fd);
}

void DatagramEndpoint::add_peer(int rank, std::vector<PathAddress> addresses) {
  MT_CHECK(!addresses.empty(), "DLCP: rank ", rank, " has no address");
  std::vector<sockaddr_in> s;
  for (const auto& a : addresses) s.push_back(to_sockaddr(a));
  peers_[rank] = std::move(s);
  peer_text_[rank] = std::move(addresses);
}

std::string DatagramEndpoint::describe_peer(int rank) const {
  const auto it = peer_text_.find(rank);
  const auto name = peer_name_.find(rank);
  return (name == peer_name_.end() ? "rank " + std::to_string(rank) : name->second) +
         (it == peer_text_.end() ? "" : " at " + format_paths(it->second));
}

int DatagramEndpoint::paths_to(int rank) const {
  const auto it = peers_.find(rank);
  MT_CHECK(it != peers_.end(), "DLCP: no address known for rank ", rank);
  return static_cast<int>(std::max(fds_.size(), it->second.size()));
}

bool DatagramEndpoint::send_now(int rank, int path, uint8_t priority, const std::vector<uint8_t>& bytes) {
  const auto& addrs = peers_.at(rank);
  const size_t local = static_cast<size_t>(path) % fds_.size();
  const sockaddr_in& to = addrs[static_cast<size_t>(path) % addrs.size()];
  const int fd = fds_[local];
  const int tos = tos_of_class(priority);
  if (tos_[local] != tos) {
    // Unprivileged and harmless to refuse: the class then only orders our own sending.
    if (::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) == 0) tos_[local] = tos;
  }
  const ssize_t n = ::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return false;
    // ECONNREFUSED and the like come from an earlier ICMP error: the datagram counts as lost.
    return true;
  }
  sent_[local].packets += 1;
  sent_[local].bytes += bytes.size();
  return true;
}

std::shared_ptr<PacketFaults> random_loss(double fraction, uint64_t seed) {
  class RandomLoss final : public PacketFaults {
   public:
    RandomLoss(double fraction, uint64_t seed) : fraction_(fraction), random_(seed) {}
    FaultAction decide(const PacketHeader& h, int) override {
      if (h.kind == PacketKind::Ack) return FaultAction::Deliver;
      return std::uniform_real_distribution<double>(0.0, 1.0)(random_) < fraction_ ? FaultAction::Drop
                                                                                      : FaultAction::Deliver;
    }

   private:
    double fraction_;
    std::mt19937_64 random_;
  };
  return std::make_shared<RandomLoss>(fraction, seed);
}

bool DatagramEndpoint::send(int rank, int path, const PacketHeader& header, const std::vector<uint8_t>& bytes) {
  MT_CHECK(peers_.count(rank), "DLCP: no address known for rank ", rank);
  FaultAction action = injector_ ? injector_->decide(header, path) : FaultAction::Deliver;
  if (action == FaultAction::Drop) return true;
  if (action == FaultAction::HoldBack) {
    held_.push_back({rank, path, header.priority, bytes});
    return true;
  }
  if (!send_now(rank, path, header.priority, bytes)) return false;
  if (action == FaultAction::Duplicate) send_now(rank, path, header.priority, bytes);
  flush_held();  // held packets go out after this one: they arrive reordered
  return true;
}

void DatagramEndpoint::flush_held() {
  for (const Held& h : held_) send_now(h.rank, h.path, h.priority, h.bytes);
  held_.clear();
}

int DatagramEndpoint::receive_from(int fd, std::vector<uint8_t>* bytes) {
  sockaddr_in from{};
  socklen_t len = sizeof(from);
  bytes->resize(kMaxDatagramBytes);
  const ssize_t n = ::recvfrom(fd, bytes->data(), bytes->size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
  if (n < 0) return -2;
  bytes->resize(static_cast<size_t>(n));
  for (const auto& [rank, addrs] : peers_)
    for (const auto& a : addrs)
      if (same(a, from)) return rank;
  return -1;
}

bool DatagramEndpoint::receive(std::vector<uint8_t>* bytes, int* from_rank, std::chrono::microseconds timeout,
                               int* path) {
  // First whatever is already queued (no system call to wait), sockets taken in turn.
  for (size_t k = 0; k < fds_.size(); ++k) {
    const size_t i = (next_fd_ + k) % fds_.size();
    const int r = receive_from(fds_[i], bytes);
    if (r != -2) {
      next_fd_ = i + 1;
      *from_rank = r;
      if (path) *path = static_cast<int>(i);
      return true;
    }
  }
  if (timeout.count() <= 0) return false;
  std::vector<pollfd> polls;
  for (int fd : fds_) polls.push_back({fd, POLLIN, 0});
  timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
  if (::ppoll(polls.data(), polls.size(), &ts, nullptr) <= 0) return false;
  for (size_t i = 0; i < polls.size(); ++i) {
    if (!(polls[i].revents & POLLIN)) continue;
    const int r = receive_from(fds_[i], bytes);
    if (r != -2) {
      *from_rank = r;
      if (path) *path = static_cast<int>(i);
      return true;
    }
  }
  return false;
}

}  // namespace mt::dist::dlcp
