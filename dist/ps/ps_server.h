// A parameter server (docs/algorithms.md, as BytePS): it holds no model. Worker 0 tells it its
// partitions at set-up (dist/ps/ps_protocol.h); then, each iteration, it receives every worker's
// push of each partition, sums the N pushes (in worker order, so the result does not depend on
// timing) and sends the sum back to every worker: synchronous, the same math as an allreduce.
// A partition's pushes for the next iteration are received into its buffers as soon as its sum
// is taken, so a fast worker is never held up by the server.
//
// Partitions are served in the order their pushes arrive: each push is followed by a note
// naming it, the server takes the notes of all workers as they come (ps_arrivals.h), and the
// partition whose N-th push arrives first is summed and answered first. So a partition pushed late
// (ByteScheduler's layer 0) overtakes the ones still on their way. When the note asks for it,
// the server sends the worker a receipt as it takes the push. Every wait has the world's
// timeout; a worker that dies or falls silent stops the server with an Error naming the worker.
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
