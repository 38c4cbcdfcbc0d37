// A parameter server (README.md): receives every worker's push of each partition, sums the N
// pushes in worker order and sends the sum back to every worker, serving partitions in the order
// their pushes arrive (ps_arrivals.h). A silent or dead worker stops it with an Error naming it.
#pragma once
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

struct PsServerOptions {
  int workers = 1;                // N: world ranks 0..N-1
  int servers = 1;                // S: world ranks N..N+S-1
  int64_t partition_bytes = 4 << 20;
  // The wait for the next push's note gives up after this at the latest; each worker's own
  // connection times out at the world's timeout first.
  std::chrono::milliseconds backstop{std::chrono::seconds(900)};
};

struct PsServerStats {
  int64_t iterations = 0;
  int64_t partitions = 0;        // this server's share
  int64_t pushes_received = 0;   // partition x worker x iteration
  int64_t pulls_answered = 0;
  int64_t bytes_received = 0;
  int64_t receipts_sent = 0;
  std::vector<int64_t> last_answer_order;  // partition ids, in the order the last iteration answered them
};

class ParameterServer {
 public:
  // `world`: the workers and servers; this process must be one of the server ranks.
  ParameterServer(std::shared_ptr<ProcessGroup> world, PsServerOptions options);

  int index() const { return world_->rank() - options_.workers; }
  // Handshake with worker 0 (a mismatch of workers, servers or partition_bytes is an Error
  // naming both values, on both sides), then serves until worker 0 says stop.
  PsServerStats run(std::ostream* log = nullptr);

 private:
  std::string who() const;  // "parameter server 1 (rank 5)"
  std::string worker(int w) const;  // "worker 2 (rank 2)"

  std::shared_ptr<ProcessGroup> world_;
  PsServerOptions options_;
};

}  // namespace mt::dist
