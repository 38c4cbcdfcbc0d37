// The cost model of the methods that send the gradient as partitions (docs/algorithms.md
// section 5): the parameter server's BSP-PS and WFBP-PS, and ByteScheduler on allreduce (A2A)
// and on the parameter server. Same DAG as cost_model.h (per-layer backward, tasks on FIFO
// resources, the critical path), with partitions instead of messages and more resources:
//
//   allreduce   one link (the ring). A partition's start-up (alpha) runs from its launch, its
//               transfer (T(M) - alpha) after the previous partition's transfer: partitions
//               launched together pipeline their start-ups, one launched alone pays all of it.
//   parameter   a worker's uplink and downlink, and each server's link in and out. Push k goes
//   server      up the worker's link (latency + b/bw) while its server's link takes all N
//               workers' copies (latency + N b/bw); the server sums once both are done, then
//               pull k comes back the same way. Every resource is a FIFO in launch order, so two
//               servers take turns with one worker's partitions and halve the server-bound time.
//               The workers are alike: one stands for all.
//
// A schedule says when a partition may leave and in which order:
//   BSP-PS            after backward, all at once, in push order (backward order);
//   WFBP-PS           as soon as its layer's gradient is ready, in push order;
//   ByteScheduler     as soon as ready, but the ready ones leave by priority (layers nearer the
//                     input first) and only while the bytes in flight stay within the credit
//                     (one partition may always go; in flight: launched and, on allreduce,
//                     not yet done, on the PS, not yet taken by the server: its receipt); the next
//                     iteration's forward of layer l waits only for layer l's partitions and its
//                     share of the update (gated forward), so the last partitions overlap it.
// Partitions are the runtime's: dist/ps_partition.h (a slice of one layer's gradient, at most
// partition_bytes; spread over the servers by size).
//
// The DAG of one steady-state iteration starts at backward (the previous iteration's
// communication has finished: every layer's forward waited for its own) and ends with the next
// iteration's forward: backward L-1..0, partitions, update, next forward 0..L-1. Its length is
// the period between two iterations; without gating it equals forward + backward + the exposed
// communication + update, as cost_model.h's DAG.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/predict/cost_model.h"
#include "dist/ps/ps_partition.h"

namespace mt::dist {

// The parameter server's links (seconds, seconds per byte). Every worker and every server has a
// full-duplex link; the N workers are alike.
struct PsLinks {
  int workers = 1;
  int servers = 1;
  double latency = 0.0;                  // one message's start-up, one way
  double worker_seconds_per_byte = 0.0;  // a worker's link, each direction
  double server_seconds_per_byte = 0.0;  // a server's link, each direction
};

enum class Architecture { AllReduce, ParameterServer };

struct PartitionSchedule {
  Architecture architecture = Architecture::ParameterServer;
  int64_t partition_bytes = 4 << 20;
  bool after_backward = false;  // BSP: every partition waits for the whole backward
  bool input_first = false;     // priority: layers nearer the input first (else push order)
  double credit_bytes = 0.0;    // bytes in flight at most; <= 0: no limit
  bool gated_forward = false;   // next forward of layer l waits for layer l only
};

// The four methods' schedules (credit only for ByteScheduler).
PartitionSchedule bsp_ps(int64_t partition_bytes);
PartitionSchedule wfbp_ps(int64_t partition_bytes);
PartitionSchedule bytescheduler(Architecture architecture, int64_t partition_bytes, double credit_bytes);

// One iteration's period (see above). `ring` prices allreduce partitions, `links` parameter-server
// ones (the other is unused). The layers' gradient sizes are rounded to whole float32 values.
// Errors: partition_bytes < 4, a PS with fewer than 1 worker or server, negative costs.
Prediction predict_partitioned(const std::vector<LayerCost>& layers, double update_seconds,
                               const PartitionSchedule& schedule, const LinearCost& ring, const PsLinks& links);

// ByteScheduler's credit picked by evaluating the DAG: candidates partition_bytes x 1, 2, 4, ...
// up to the first that covers the whole gradient; the fastest (the smallest of equals).
struct CreditChoice {
  double credit_bytes = 0.0;
  Prediction prediction;
  std::vector<std::pair<double, double>> tried;  // (credit bytes, predicted seconds)
};
CreditChoice best_credit(const std::vector<LayerCost>& layers, double update_seconds, Architecture architecture,
                         int64_t partition_bytes, const LinearCost& ring, const PsLinks& links);

}  // namespace mt::dist
