// DLCP's parameter server (the worker side is ps_worker.h): a process started by `mintrain
// launch --nservers S` that holds no model. At set-up it joins the workers' datagram endpoints
// (connect_transport over the world of workers and servers, which also checks that everyone runs
// the same packet size, p, deadline and lossless_pull) and answers worker 0's handshake
// (ps_handshake.h) for its partition table. Then, for each {step, iteration} command from
// worker 0 (over Gloo):
//
//   receive  one push from every worker at once (exchange_all), each under the bounded-loss rule
//            on its own: all packets, or (1 - p) of them once the deadline has passed since its
//            first packet; what is missing is 0 with count 0;
//   sum      in worker order (the result does not depend on timing), values and counts;
//   send     the sums to every worker at once, each packet with its count as `contributors` and
//            the highest class the workers gave it; with lossless_pull every packet arrives.
//
// It stops at {stop}. A worker that falls silent for dist.timeout_seconds stops it with an
// Error naming the worker.
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
