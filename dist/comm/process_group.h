// Process groups: collectives over a fixed set of ranks, on a real engine (Gloo for CPU
// tensors over TCP or ibverbs; NCCL for CUDA tensors). Every operation is asynchronous and
// returns a Work handle; wait() blocks until it is done and throws an Error naming the
// operation, the group and the rank when a peer died or the timeout passed: nothing hangs.
//
// Collectives on one group run in the order they are issued, the same order on every rank
// (the caller's job; the S-SGD schedules guarantee it). Tensors are contiguous and must not be
// touched until wait() returns.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
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
  // Where this group's collectives take their tensors: the CPU for Gloo, the communicator's GPU
  // for NCCL. What sends host values (the set-up check, metric averages, plans, votes) stages
  // them there, so the same code runs on either backend.
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

  // Point to point (the parameter server's pushes and pulls): `tensor` goes to, or comes from,
  // rank `peer` of this group. A send meets the peer's recv with the same tag; messages of one
  // tag between two ranks arrive in the order sent. Unlike collectives they are posted at once,
  // not queued behind other operations, so a pending recv never holds up a later send; wait()
  // keeps the group's timeout. Backends without them (NCCL here) throw an Error saying so.
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int peer, uint32_t tag);
  virtual std::shared_ptr<Work> recv(Tensor& tensor, int peer, uint32_t tag);

  // A group of some of this group's ranks (by rank in this group, sorted, including this
  // rank). Created once and cached: asking again for the same ranks returns the same group.
  // Every rank in `ranks` must ask for it (collectively with the others of `ranks`).
  virtual std::shared_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks) = 0;
  // Forgets the cached subgroup of `ranks` (nothing if there is none): once the callers' own
  // handles are gone, its connections and communication thread close. Every member releases it
  // (in the same order as they made their subgroups); asking for the same ranks again connects a
  // new one. For communicators needed only for a while (the rack probe's pairs).
  virtual void release_subgroup(const std::vector<int>& ranks) = 0;
};

// Waits for `work`; a failure (timeout, dead peer) is rethrown as an Error that also says what
// this rank was doing, so the first line of the log is enough to find the problem.
void finish(const std::shared_ptr<Work>& work, const ProcessGroup& group, const std::string& what);

struct ProcessGroupOptions {
  std::string backend = "gloo";    // "gloo" (CPU tensors) or "nccl" (CUDA tensors)
  std::string transport = "tcp";   // gloo: "tcp" or "ibverbs"
  std::string interface;           // network interface to bind (e.g. "eth0"); empty = by hostname/address
  std::string hostname;            // gloo tcp: address/name to bind when no interface is given
                                   // (empty = this host's name; rendezvous sets 127.0.0.1 for
                                   // loopback jobs)
  std::string ib_device;           // ibverbs device name (empty = first)
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Whether a job can run its collectives on this Gloo transport; throws a core::Error saying
// why not and what to use instead. "ibverbs": Debian's Gloo runs only its bound-buffer
// algorithms on it, and every collective of ours uses unbound buffers (they are what lets one
// context carry many collectives in flight), so the transport is refused when the config is
// read, never mid-run. On an InfiniBand cluster: "tcp" over IPoIB for CPU jobs, or CUDA tensors
// with backend "nccl", whose IB transport uses rdma-core directly.
void check_collective_transport(const std::string& transport);

// A fresh communicator over all of `group`'s ranks that nothing else shares: for exchanges run
// from a thread of their own (CD-SGD's pipeline, ByteScheduler's engine), so that nothing the
// training thread issues on the group, or on the job's stop-vote subgroup of everyone, can
// interleave with them. Subgroups are cached by their ranks, so any cached one of everyone is
// forgotten first (its holders keep it), a fresh one connected, and forgotten too, so that no
// later subgroup(everyone) shares it. Collective: every rank calls it at the same point.
std::shared_ptr<ProcessGroup> private_communicator(ProcessGroup& group);

// The subgroups a group has made, by member list (Gloo's and NCCL's groups keep theirs alike).
class Subgroups {
 public:
  // Made by `make(prefix, rank in the subgroup, members as world ranks)` the first time, the
  // same one after. `ranks`: sorted, distinct, this rank among them (else an Error naming
  // `who`); `parent_world`: the parent's members as world ranks. Each connection gets store keys
  // of its own (prefix "<parent>/sub/0,3", "#1" after a release, and so on).
  using Make = std::function<std::shared_ptr<ProcessGroup>(const std::string&, int, std::vector<int>)>;
  std::shared_ptr<ProcessGroup> get(const std::vector<int>& ranks, int rank, const std::vector<int>& parent_world,
                                    const std::string& parent_prefix, const std::string& who, const Make& make);
  void release(const std::vector<int>& ranks);

 private:
  std::mutex mutex_;
  std::map<std::vector<int>, std::shared_ptr<ProcessGroup>> groups_;
  std::map<std::vector<int>, int> released_;  // subgroups of these ranks released so far
};

// "0,3,4"
std::string join_ranks(const std::vector<int>& ranks);

// Creates the world group; every rank calls it with the same store.
std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                   const ProcessGroupOptions& options);

}  // namespace mt::dist
