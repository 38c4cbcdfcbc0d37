// Process groups: collectives over a fixed set of ranks, on Gloo (CPU tensors) or NCCL (CUDA
// tensors). Every operation is asynchronous and returns a Work; wait() throws an Error naming
// the operation, the group and the rank when a peer died or the timeout passed. Collectives on
// one group run in issue order, which must be the same on every rank (the caller's job).
// Tensors are contiguous and untouched until wait() returns.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/comm/store.h"

namespace mt::dist {

using core::Tensor;

enum class ReduceOp { Sum, Max, Min };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo", "nccl"
  virtual std::string describe() const = 0; // e.g. "gloo/tcp world of 4" or "group {0,2} of world 4"
  // Where the collectives take their tensors (the CPU for Gloo, the GPU for NCCL): host values
  // are staged there, so the same code runs on either backend.
  virtual core::Device device() const { return core::Device::cpu(); }

  // In place: every rank ends with op over all ranks' tensors.
  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root) = 0;
  // output holds size() * input.numel() elements: rank r's input at offset r * input.numel().
  virtual std::shared_ptr<Work> allgather(const Tensor& input, Tensor& output) = 0;
  // Rank r contributes counts[r] elements; output holds sum(counts), in rank order.
  virtual std::shared_ptr<Work> allgatherv(const Tensor& input, Tensor& output,
                                           const std::vector<int64_t>& counts) = 0;
  // input holds size() * output.numel() elements; rank r receives the sum of block r.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output) = 0;
  virtual void barrier() = 0;

  // Point to point (the parameter server's): a send meets the peer's recv of the same tag, in
  // order. Posted at once, not queued behind collectives; NCCL's group has none (an Error).
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int peer, uint32_t tag);
  virtual std::shared_ptr<Work> recv(Tensor& tensor, int peer, uint32_t tag);

  // A group of some of this group's ranks (sorted, this rank among them), made collectively by
  // its members once and cached. Releasing forgets it (it closes with its last handle); asking
  // again connects a new one.
  virtual std::shared_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks) = 0;
  virtual void release_subgroup(const std::vector<int>& ranks) = 0;
};

// Waits for `work`; a failure (timeout, dead peer) is rethrown as an Error that also says what
// this rank was doing, so the first line of the log is enough to find the problem.
inline void finish(const std::shared_ptr<Work>& work, const ProcessGroup& group, const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    MT_FAIL("rank ", group.rank(), " of ", group.size(), ": ", what, " failed: ", e.what());
  }
}

struct ProcessGroupOptions {
  std::string backend = "gloo";    // "gloo" (CPU tensors) or "nccl" (CUDA tensors)
  std::string transport = "tcp";   // gloo: "tcp" or "ibverbs"
  std::string interface;           // network interface to bind (e.g. "eth0"); empty = by hostname/address
  std::string hostname;            // gloo tcp, no interface: what to bind (empty = this host's name)
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Whether a job can run its collectives on this Gloo transport; an Error says why not and what
// to use instead ("ibverbs": Debian's Gloo runs only bound-buffer algorithms on it, ours use
// unbound buffers; refused when the config is read, never mid-run).
void check_collective_transport(const std::string& transport);

// Creates the world group; every rank calls it with the same store.
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                   const ProcessGroupOptions& options);

}  // namespace mt::dist
