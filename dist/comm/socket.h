// Small blocking-with-deadline TCP helpers shared by the store and the launcher. Every call
// takes a deadline, so nothing here can wait forever: a peer that stops talking becomes an
// Error, never a hang. Errors say what failed at the socket level; callers add who and why.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace mt::dist::net {

using Clock = std::chrono::steady_clock;

// Opens a connection to host:port, retrying refused/unreachable attempts until the deadline.
// Returns the socket, or -1 with *last_error describing the last failure.
int connect_until(const std::string& host, int port, Clock::time_point deadline,
                  std::string* last_error);

// A listening socket on every interface's `port` (0: the kernel picks one, returned in *bound_port):
// MASTER_ADDR is how others reach the store, not where it listens.
int listen_on(int port, int* bound_port);

// A port that was free a moment ago (bind to 0, read it, close). Another process may take it
// before we use it; callers that host a server on it retry or fail with a clear message.
int pick_free_port();

// Writes/reads exactly n bytes before the deadline; throws core::Error("timed out" /
// "connection closed by peer" / strerror) otherwise.
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline);
void recv_all(int fd, void* data, size_t n, Clock::time_point deadline);

void set_nonblocking(int fd, bool on);
void close_fd(int& fd);  // closes and sets -1 (no-op on -1)

// The local IPv4 address the kernel would use to reach `host` (a UDP connect: no packet is
// sent); "" when `host` does not resolve or no route reaches it.
std::string local_address_towards(const std::string& host);

}  // namespace mt::dist::net
