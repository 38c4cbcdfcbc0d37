#include "dist/comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace mt::dist::net {

namespace {

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits until fd is readable/writable (events) or the deadline passes; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) MT_FAIL("poll failed: ", std::strerror(errno));
  }
}

// One non-blocking connect attempt bounded by the deadline.
int try_connect(const addrinfo* ai, Clock::time_point deadline, std::string* err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *err = std::strerror(errno);
    return -1;
  }
  set_nonblocking(fd, true);
  int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (r != 0 && errno == EINPROGRESS) {
    if (!wait_fd(fd, POLLOUT, deadline)) {
      *err = "connect timed out";
      ::close(fd);
      return -1;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    r = so_error == 0 ? 0 : -1;
    errno = so_error;
  }
  if (r != 0) {
    *err = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  set_nonblocking(fd, false);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int connect_until(const std::string& host, int port, Clock::time_point deadline,
                  std::string* last_error) {
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (g != 0) {
      *last_error = std::string("cannot resolve host: ") + ::gai_strerror(g);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        const int fd = try_connect(ai, deadline, last_error);
        if (fd >= 0) {
          ::freeaddrinfo(res);
          return fd;
        }
      }
      ::freeaddrinfo(res);
    }
    // Refused usually means rank 0 has not started listening yet: retry with a short backoff.
    if (Clock::now() + backoff >= deadline) return -1;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

int listen_on(int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int g = ::getaddrinfo(nullptr, std::to_string(port).c_str(), &hints, &res);
  MT_CHECK(g == 0, "cannot resolve the listen address: ", ::gai_strerror(g));
  std::string err = "no address";
  int fd = -1;
  // Prefer IPv6 dual-stack when available, else IPv4 (getaddrinfo's order).
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      int zero = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
    err = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  MT_CHECK(fd >= 0, "cannot listen on port ", port, ": ", err);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

int pick_free_port() {
  int port = 0;
  int fd = listen_on(0, &port);
  ::close(fd);
  return port;
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) MT_FAIL("timed out sending");
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      MT_FAIL("send failed: ", std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) MT_FAIL("timed out waiting for a reply");
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) MT_FAIL("connection closed by peer");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      MT_FAIL("recv failed: ", std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char text[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof(text)) != nullptr)
      out = text;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace mt::dist::net
