// TCPStore: the Store every rank reaches over TCP; rank 0 hosts it (tcp_store_server.h), every
// rank is a client. Frames are a u32 length and the payload (store_wire.h); the first request
// is HELLO with the job token (MINTRAIN_JOB_TOKEN), so a stray process is turned away.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/store.h"

namespace mt::dist {

class TCPStoreServer;

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // the server's address (clients) / bind address (server)
  int port = 29500;                // 0 with is_server: pick a free port (see port())
  bool is_server = false;          // true on rank 0: host the server in this process
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string token;               // defaults to $MINTRAIN_JOB_TOKEN when left empty
  int rank = -1;                   // for error messages only (-1: unknown)
  // While connecting takes longer than this, a line every interval on stderr says so
  // ("rank 1: waiting for rank 0 at host:port, 30/300 s (...)"); 0: silent.
  std::chrono::milliseconds report_every{0};
  // When it turns true, waiting to connect ends with core::Interrupted (a stop request).
  const std::atomic<bool>* stop = nullptr;
};

class TCPStore : public Store {
 public:
  static constexpr size_t kMaxValueBytes = size_t(64) << 20;  // 64 MiB

  explicit TCPStore(const TCPStoreOptions& options);
  ~TCPStore() override;  // stops the server thread (on the host) and closes the connection
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  // A second connection to this store whose calls give up after `timeout`: for questions that
  // must not wait the job's whole timeout (who else is there, after a collective timed out).
  std::shared_ptr<Store> with_timeout(std::chrono::milliseconds timeout) const override;

  // Like wait() but with its own timeout; throws Error naming the missing keys.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  int port() const { return port_; }  // the actual port (useful after port 0)
  std::string address() const { return options_.host + ":" + std::to_string(port_); }

 private:
  std::vector<uint8_t> request(const std::vector<uint8_t>& payload,
                               std::chrono::milliseconds timeout, const std::string& what);
  void connect_locked();
  void disconnect_locked();
  std::string who() const;

  TCPStoreOptions options_;
  int port_ = 0;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex mutex_;  // one request at a time on the connection
  int fd_ = -1;
};

}  // namespace mt::dist
