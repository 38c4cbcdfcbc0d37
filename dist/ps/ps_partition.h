// The parameter server's partition plan (docs/algorithms.md, as BytePS): every gradient is cut
// into partitions of at most `partition_bytes`, and each partition is given to one server so
// that the servers hold about the same number of bytes. A partition is a slice of one
// parameter, never a mix of two: a parameter's partitions can go as soon as its own gradient is
// final (WFBP-PS), and small tensors stay their own messages as in BytePS (merging them is
// tensor fusion's business, not the parameter server's).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mt::dist {

struct PsPartition {
  size_t param = 0;      // index into the optimizer's parameters
  int64_t offset = 0;    // first element of the slice (in the flattened parameter)
  int64_t numel = 0;     // elements of the slice
  int server = 0;        // 0..S-1
  int64_t bytes() const { return numel * 4; }  // float32 gradients
};

// Partitions in push order: parameters in `push_order` (the order their gradients are expected
// to be ready, i.e. backward order), each cut from its first element on; then assigned to
// servers largest first, each to the server holding the fewest bytes so far (ties: the lowest
// index), which keeps the servers' loads within one partition of each other.
// Errors name the argument: partition_bytes < 4, servers < 1, an index out of range.
std::vector<PsPartition> plan_partitions(const std::vector<int64_t>& param_numel,
                                         const std::vector<size_t>& push_order, int64_t partition_bytes,
                                         int servers);

// Bytes per server (index = server).
std::vector<int64_t> bytes_per_server(const std::vector<PsPartition>& plan, int servers);

// The staggered schedule's push order for one worker: each server's partitions (in push order)
// cut into `rounds` runs of about equal bytes (a partition goes to the round its middle byte
// falls in), then round by round one group per server, worker w starting at server w mod S and
// going up: at each step of a round the first S workers push to S different servers.
struct PsPushGroup {
  int server = 0;
  std::vector<size_t> partitions;  // indices into the plan, in plan order
};
// `order`: the partitions in the order to push them (all of them once); empty: plan order.
std::vector<PsPushGroup> staggered_push_groups(const std::vector<PsPartition>& plan, int servers, int rounds,
                                               int worker, const std::vector<size_t>& order = {});

// "12 partitions (4 MB max): server 0 1.2 MB in 6, server 1 1.1 MB in 6" for the log.
std::string describe_plan(const std::vector<PsPartition>& plan, int servers, int64_t partition_bytes);

}  // namespace mt::dist
