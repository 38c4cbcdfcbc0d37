#include "dist/comm/tcp_store.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "dist/comm/socket.h"
#include "dist/comm/store_wire.h"
#include "dist/comm/tcp_store_server.h"

namespace mt::dist {

namespace {

std::string key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 16; ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  if (keys.size() > 16) out += " and " + std::to_string(keys.size() - 16) + " more";
  return out;
}

// One frame there and its length-prefixed answer back, by `deadline`.
std::vector<uint8_t> exchange(int fd, const std::vector<uint8_t>& frame, net::Clock::time_point deadline) {
  net::send_all(fd, frame.data(), frame.size(), deadline);
  uint32_t n = 0;
  net::recv_all(fd, &n, 4, deadline);
  MT_CHECK(n > 0 && n <= wire::kMaxFrameBytes, "bad reply length ", n);
  std::vector<uint8_t> answer(n);
  net::recv_all(fd, answer.data(), n, deadline);
  return answer;
}

}  // namespace

TCPStore::TCPStore(const TCPStoreOptions& options) : options_(options), port_(options.port) {
  if (options_.token.empty()) {
    if (const char* t = std::getenv("MINTRAIN_JOB_TOKEN")) options_.token = t;
  }
  if (options_.is_server) {
    try {
      server_ = std::make_unique<TCPStoreServer>(options_.port, options_.token);
    } catch (const core::Error& e) {
      MT_FAIL(who(), ": cannot host the store on port ", options_.port, ": ", e.what(),
              ". Is another job using this port? Choose another MASTER_PORT.");
    }
    port_ = server_->port();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  connect_locked();
}

TCPStore::~TCPStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    disconnect_locked();
  }
  server_.reset();  // joins the server thread
}

std::string TCPStore::who() const {
  return options_.rank >= 0 ? "rank " + std::to_string(options_.rank) : std::string("this process");
}

std::shared_ptr<Store> TCPStore::with_timeout(std::chrono::milliseconds timeout) const {
  TCPStoreOptions o = options_;
  o.is_server = false;
  o.port = port_;
  o.timeout = timeout;
  o.report_every = std::chrono::milliseconds(0);
  return std::make_shared<TCPStore>(o);
}

void TCPStore::connect_locked() {
  if (fd_ >= 0) return;
  const auto start = net::Clock::now();
  const auto deadline = start + options_.timeout;
  std::string last_error;
  // In slices of report_every, saying after each that we still wait: a wrong MASTER_PORT
  // must not look like a silent hang for the whole timeout.
  // A stop request is looked at every 200 ms.
  const bool report = options_.report_every.count() > 0;
  auto waited = options_.report_every;  // the next "waiting" line is due at start + waited
  for (;;) {
    auto until = report ? std::min(deadline, start + waited) : deadline;
    if (options_.stop) until = std::min(until, net::Clock::now() + std::chrono::milliseconds(200));
    fd_ = net::connect_until(options_.host, port_, until, &last_error);
    if (fd_ >= 0 || until >= deadline) break;
    std::this_thread::sleep_until(until);  // connect_until may give up a backoff early
    if (options_.stop && options_.stop->load())
      throw core::Interrupted(who() + ": stopped (a stop request) while waiting for rank 0 at " + address());
    if (!report || net::Clock::now() < start + waited) continue;
    std::fprintf(stderr, "%s: waiting for rank 0 at %s, %s/%s s (%s)\n", who().c_str(), address().c_str(),
                 seconds_number(waited).c_str(), seconds_number(options_.timeout).c_str(), last_error.c_str());
    waited += options_.report_every;
  }
  if (fd_ < 0) {
    MT_FAIL(who(), ": could not reach the store at ", address(), " after ", seconds_number(options_.timeout) + " s",
            " (", last_error, "): is rank 0 running? check MASTER_ADDR/MASTER_PORT");
  }
  // Present the job token; a mismatch is final, so no retry.
  const auto frame = wire::Writer().u8(wire::kHello).str(options_.token).frame();
  std::vector<uint8_t> answer;
  try {
    answer = exchange(fd_, frame, deadline);
  } catch (const core::Error& e) {
    disconnect_locked();
    MT_FAIL(who(), ": the store at ", address(), " did not answer the handshake: ", e.what(),
            ". Is MASTER_PORT the port of a mintrain store?");
  }
  wire::Reader r(answer.data(), answer.size());
  if (r.u8() != wire::kOk) {
    const std::string message = r.str();
    disconnect_locked();
    MT_FAIL(who(), ": the store at ", address(), " rejected this process: ", message);
  }
}

void TCPStore::disconnect_locked() { net::close_fd(fd_); }

std::vector<uint8_t> TCPStore::request(const std::vector<uint8_t>& frame,
                                       std::chrono::milliseconds timeout, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<uint8_t> answer;
  try {
    connect_locked();
    answer = exchange(fd_, frame, net::Clock::now() + timeout);
  } catch (const core::Interrupted&) {  // a stop request while it reconnected: not a store error
    throw;
  } catch (const core::Error& e) {
    // The reply may still come later: drop the connection so it cannot be mistaken for the
    // answer to the next request (the next request reconnects).
    disconnect_locked();
    std::string why = e.what();
    if (why.find("closed by peer") != std::string::npos || why.find("reset by peer") != std::string::npos) {
      why += " (the store went away: rank 0 probably exited; see its output)";
    }
    MT_FAIL(who(), ": store ", what, " at ", address(), ": ", why);
  }
  if (answer[0] == wire::kError) {
    wire::Reader r(answer.data() + 1, answer.size() - 1);
    const std::string message = r.str();
    disconnect_locked();  // the server closes the connection after an error
    MT_FAIL(who(), ": store ", what, " failed: ", message);
  }
  return answer;
}

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  MT_CHECK(value.size() <= kMaxValueBytes, who(), ": store set(\"", key, "\") of ", value.size(),
           " bytes is over the store's limit of ", kMaxValueBytes, " bytes");
  request(wire::Writer().u8(wire::kSet).str(key).bytes(value.data(), value.size()).frame(), options_.timeout,
          "set(\"" + key + "\")");
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  wait({key});
  const auto answer = request(wire::Writer().u8(wire::kGet).str(key).frame(), options_.timeout,
                              "get(\"" + key + "\")");
  MT_CHECK(answer[0] == wire::kOk, who(), ": store get(\"", key, "\"): the key vanished");
  wire::Reader r(answer.data() + 1, answer.size() - 1);
  return r.bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const auto answer = request(wire::Writer().u8(wire::kAdd).str(key).i64(delta).frame(), options_.timeout,
                              "add(\"" + key + "\")");
  wire::Reader r(answer.data() + 1, answer.size() - 1);
  return r.i64();
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  wire::Writer w;
  w.u8(wire::kCheck).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const auto answer = request(w.frame(), options_.timeout, "check(" + key_list(keys) + ")");
  wire::Reader r(answer.data() + 1, answer.size() - 1);
  return r.u8() != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  wire::Writer w;
  w.u8(wire::kWait).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  try {
    request(w.frame(), timeout, "wait(" + key_list(keys) + ")");
    return;
  } catch (const core::Error& e) {
    if (std::string(e.what()).find("timed out") == std::string::npos) throw;
  }
  // Timed out: name exactly the keys that are still missing (one quick check each).
  std::vector<std::string> missing;
  try {
    for (const auto& k : keys) {
      if (!check({k})) missing.push_back(k);
    }
  } catch (const core::Error&) {
    missing = keys;
  }
  MT_FAIL(who(), ": timed out after ", seconds_number(timeout) + " s", " waiting for store key(s) ",
          key_list(missing.empty() ? keys : missing), " at ", address(),
          ": the rank(s) that should set them did not get there (crashed, slower, or started "
          "with another MASTER_PORT)");
}

}  // namespace mt::dist
