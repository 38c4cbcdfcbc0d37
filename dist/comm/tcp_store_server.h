// The TCP store's server: one thread, one poll() loop over the listening socket, a wake-up
// pipe and every client connection. It owns the key-value map, so no locks are needed. WAIT
// requests are parked until their keys exist; clients enforce their own timeouts (and drop the
// connection when one passes), so the server never needs a timer.
#pragma once
#include <string>
#include <thread>

namespace mt::dist {

class TCPStoreServer {
 public:
  // Listens on every interface at `port` (0: any free port) and starts the thread. `token`:
  // the job token every client must present in its HELLO.
  TCPStoreServer(int port, std::string token);
  ~TCPStoreServer();  // wakes the thread, joins it, closes every socket
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  void loop();

  std::string token_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace mt::dist
