// DLCP's parameter server (README.md; the worker side is ps_worker.h): for each {step} command,
// every worker's push at once under the loss rule (missing values 0 with count 0), the sums in
// worker order with their counts, sent back to every worker; it stops at {stop}.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "dist/dlcp/dlcp_synchronizer.h"
#include "dist/comm/process_group.h"

namespace mt::dist::dlcp {

struct DlcpServerOptions {
  int workers = 1;  // N: world ranks 0..N-1
  int servers = 1;  // S: world ranks N..N+S-1
  DlcpOptions dlcp;  // dlcp.partition_bytes is checked against the workers' in the handshake
};

struct DlcpServerStats {
  int64_t iterations = 0;
  int64_t partitions = 0;  // this server's share
  uint32_t elements = 0;   // floats per push
  ExchangeStats pushes;    // everything received (packets_missing: push packets lost for good)
  ExchangeStats pulls;     // everything sent back
};

class DlcpParameterServer {
 public:
  // `world`: the workers and servers; this process must be one of the server ranks.
  DlcpParameterServer(std::shared_ptr<ProcessGroup> world, DlcpServerOptions options);

  int index() const { return world_->rank() - options_.workers; }
  DlcpServerStats run(std::ostream* log = nullptr);

 private:
  std::string who() const;  // "parameter server 1 (rank 5)"
  DlcpServerStats serve(std::ostream* log);

  std::shared_ptr<ProcessGroup> world_;
  DlcpServerOptions options_;
};

}  // namespace mt::dist::dlcp
