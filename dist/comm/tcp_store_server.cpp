#include "dist/comm/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <vector>

#include "core/error.h"
#include "dist/comm/socket.h"
#include "dist/comm/store_wire.h"

namespace mt::dist {

namespace {

struct Client {
  int fd = -1;
  std::vector<uint8_t> in;   // bytes received, not yet a whole frame
  std::vector<uint8_t> out;  // replies not yet written
  bool authenticated = false;
  bool closing = false;      // close once `out` is flushed (after an error reply)
};

struct Waiter {
  Client* client;
  std::vector<std::string> keys;
};

std::vector<uint8_t> reply(wire::Status status) { return wire::Writer().u8(status).frame(); }
std::vector<uint8_t> error_reply(const std::string& message) {
  return wire::Writer().u8(wire::kError).str(message).frame();
}

void append(std::vector<uint8_t>& out, const std::vector<uint8_t>& frame) {
  out.insert(out.end(), frame.begin(), frame.end());
}

// The map and the parked waiters; one instance lives on the server thread's stack.
class State {
 public:
  explicit State(const std::string& token) : token_(token) {}

  // Handles one complete request payload from `c`, appending its reply (if any) to c.out.
  void handle(Client& c, const uint8_t* data, size_t n) {
    wire::Reader r(data, n);
    const uint8_t op = r.u8();
    if (!c.authenticated && op != wire::kHello) return fail(c, "the first request must be HELLO");
    switch (op) {
      case wire::kHello: {
        const std::string token = r.str();
        if (!r.ok() || !r.at_end()) return fail(c, "malformed HELLO");
        if (token != token_) {
          return fail(c, "job token mismatch: every rank must run with the same "
                         "MINTRAIN_JOB_TOKEN as rank 0");
        }
        c.authenticated = true;
        return append(c.out, reply(wire::kOk));
      }
      case wire::kSet: {
        std::string key = r.str();
        std::vector<uint8_t> value = r.bytes();
        if (!r.ok() || !r.at_end()) return fail(c, "malformed SET");
        map_[key] = std::move(value);
        append(c.out, reply(wire::kOk));
        return wake_waiters();
      }
      case wire::kGet: {
        const std::string key = r.str();
        if (!r.ok() || !r.at_end()) return fail(c, "malformed GET");
        const auto it = map_.find(key);
        if (it == map_.end()) return append(c.out, reply(wire::kNotFound));
        return append(c.out, wire::Writer().u8(wire::kOk).bytes(it->second.data(), it->second.size()).frame());
      }
      case wire::kAdd: {
        const std::string key = r.str();
        const int64_t delta = r.i64();
        if (!r.ok() || !r.at_end()) return fail(c, "malformed ADD");
        int64_t value = 0;
        if (const auto it = map_.find(key); it != map_.end()) {
          // Counters are stored as decimal text so that get() on them reads naturally.
          const std::string s(it->second.begin(), it->second.end());
          char* end = nullptr;
          value = std::strtoll(s.c_str(), &end, 10);
          if (s.empty() || *end != '\0') {
            return append(c.out, error_reply("ADD on key \"" + key + "\", which holds a non-integer value"));
          }
        }
        value += delta;
        const std::string text = std::to_string(value);
        map_[key] = std::vector<uint8_t>(text.begin(), text.end());
        append(c.out, wire::Writer().u8(wire::kOk).i64(value).frame());
        return wake_waiters();
      }
      case wire::kCheck:
      case wire::kWait: {
        const uint32_t count = r.u32();
        if (!r.ok() || count > wire::kMaxKeys) return fail(c, "malformed key list");
        std::vector<std::string> keys;
        for (uint32_t i = 0; i < count && r.ok(); ++i) keys.push_back(r.str());
        if (!r.ok() || !r.at_end()) return fail(c, "malformed key list");
        const bool all = all_present(keys);
        if (op == wire::kCheck) return append(c.out, wire::Writer().u8(wire::kOk).u8(all ? 1 : 0).frame());
        if (all) return append(c.out, reply(wire::kOk));
        waiters_.push_back({&c, std::move(keys)});
        return;
      }
      default:
        return fail(c, "unknown operation " + std::to_string(op));
    }
  }

  void drop_waiters_of(const Client* c) {
    waiters_.remove_if([c](const Waiter& w) { return w.client == c; });
  }

 private:
  void fail(Client& c, const std::string& message) {
    append(c.out, error_reply(message));
    c.closing = true;
  }
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return map_.count(k) > 0; });
  }
  void wake_waiters() {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (all_present(it->keys)) {
        append(it->client->out, reply(wire::kOk));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::string token_;
  std::map<std::string, std::vector<uint8_t>> map_;
  std::list<Waiter> waiters_;
};

// Consumes every whole frame in c.in. A frame longer than the limit is refused at its header,
// before its bytes are buffered.
void process_input(State& state, Client& c) {
  size_t pos = 0;
  while (!c.closing && c.in.size() - pos >= 4) {
    uint32_t n = 0;
    std::memcpy(&n, c.in.data() + pos, 4);
    if (n > wire::kMaxFrameBytes || n == 0) {
      append(c.out, error_reply(n == 0 ? "empty message"
                                       : "message of " + std::to_string(n) +
                                             " bytes is over the store's limit of " +
                                             std::to_string(wire::kMaxFrameBytes)));
      c.closing = true;
      break;
    }
    if (c.in.size() - pos - 4 < n) break;
    state.handle(c, c.in.data() + pos + 4, n);
    pos += 4 + n;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
}

}  // namespace

TCPStoreServer::TCPStoreServer(int port, std::string token) : token_(std::move(token)) {
  listen_fd_ = net::listen_on(port, &port_);
  net::set_nonblocking(listen_fd_, true);
  MT_CHECK(::pipe2(wake_pipe_, O_CLOEXEC) == 0, "store server: pipe failed: ", std::strerror(errno));
  thread_ = std::thread([this] { loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  const char b = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_pipe_[1], &b, 1);
  if (thread_.joinable()) thread_.join();
  net::close_fd(listen_fd_);
  net::close_fd(wake_pipe_[0]);
  net::close_fd(wake_pipe_[1]);
}

void TCPStoreServer::loop() {
  State state(token_);
  std::list<Client> clients;
  std::vector<uint8_t> chunk(1 << 16);
  while (true) {
    std::vector<pollfd> fds = {{wake_pipe_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    std::vector<Client*> order;
    for (auto& c : clients) {
      fds.push_back({c.fd, static_cast<short>((c.closing ? 0 : POLLIN) | (c.out.empty() ? 0 : POLLOUT)), 0});
      order.push_back(&c);
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;  // nothing sensible left to do; clients see their connection fail
    }
    if (fds[0].revents) return;  // the destructor asked us to stop
    if (fds[1].revents & POLLIN) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        clients.push_back({.fd = fd});
      }
    }
    for (size_t i = 0; i < order.size(); ++i) {
      Client& c = *order[i];
      const short ev = fds[i + 2].revents;
      bool dead = (ev & (POLLERR | POLLNVAL)) != 0;
      if (!dead && (ev & (POLLIN | POLLHUP)) && !c.closing) {
        const ssize_t r = ::recv(c.fd, chunk.data(), chunk.size(), 0);
        if (r > 0) {
          c.in.insert(c.in.end(), chunk.begin(), chunk.begin() + r);
          process_input(state, c);
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          dead = true;
        }
      }
      if (!dead && !c.out.empty() && (ev & POLLOUT)) {
        const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (w > 0) c.out.erase(c.out.begin(), c.out.begin() + w);
        else if (errno != EAGAIN && errno != EINTR) dead = true;
      }
      if (dead || (c.closing && c.out.empty())) c.closing = true, dead = true;
      if (dead) {
        state.drop_waiters_of(&c);
        net::close_fd(c.fd);
      }
    }
    clients.remove_if([](const Client& c) { return c.fd < 0; });
  }
}

}  // namespace mt::dist
