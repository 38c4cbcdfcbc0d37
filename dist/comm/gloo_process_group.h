// GlooProcessGroup: CPU tensors on Gloo (README.md). Pair addresses go through the store under
// the group's prefix; every operation runs on the group's thread (comm_queue.h) with its own tag,
// the per-group operation count (two collectives in flight on one context must not share one).
// reduce_scatter is our own ring over unbound buffers: Gloo's snapshot has no new-style one.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/comm_queue.h"
#include "dist/comm/process_group.h"
#include "dist/comm/subgroups.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace mt::dist {

class GlooProcessGroup : public ProcessGroup,
                         public std::enable_shared_from_this<GlooProcessGroup> {
 public:
  // The world group; every rank calls it with the same store. Blocks until the mesh is
  // connected (bounded by options.timeout).
  static std::shared_ptr<GlooProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                                  const ProcessGroupOptions& options);
  ~GlooProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  std::string describe() const override { return description_; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& input, Tensor& output) override;
  std::shared_ptr<Work> allgatherv(const Tensor& input, Tensor& output,
                                   const std::vector<int64_t>& counts) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output) override;
  void barrier() override;
  // Posted on Gloo's unbound buffers from the calling thread (as PyTorch's ProcessGroupGloo
  // does), beside the collectives that run on the communication thread.
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, uint32_t tag) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int peer, uint32_t tag) override;
  std::shared_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks) override;
  void release_subgroup(const std::vector<int>& ranks) override;

  // The connected Gloo context (for benchmarks that call Gloo directly on the same mesh;
  // do not use it while operations of this group are in flight). Only new-style calls
  // (gloo::allreduce, gloo::allgather, ... with unbound buffers) belong on it: Gloo's
  // old-style algorithm classes (AllreduceRing, AllreduceRingChunked, ...) register send
  // buffers, and libgloo's tcp pair then sets SO_SNDBUF to that buffer's size for the rest of
  // the context's life - down to the kernel's 4608-byte minimum for their small notification
  // buffers. Every later collective on such a pair stalls on delayed ACKs (measured in
  // docs/PERF.md). Give old-style classes a group of their own.
  const std::shared_ptr<gloo::Context>& gloo_context() const { return context_; }

  struct Shared;  // the store, options and transport device, shared with subgroups

 private:
  std::shared_ptr<Work> point_to_point(const Tensor& tensor, int peer, uint32_t tag, bool sending);
  GlooProcessGroup(std::shared_ptr<Shared> shared, std::string prefix, int rank,
                   std::vector<int> world_ranks);
  std::string who() const;  // "rank 1 of gloo/tcp world of 4"
  // Takes the next tag and queues the operation, atomically, so tag order is issue order.
  std::shared_ptr<Work> issue(std::string op, std::function<void(uint32_t tag)> run);

  std::shared_ptr<Shared> shared_;
  std::string prefix_;
  int rank_;
  int size_;
  std::vector<int> world_ranks_;  // this group's members as world ranks
  std::string description_;
  std::shared_ptr<gloo::Context> context_;
  std::mutex issue_mutex_;
  uint32_t tag_ = 0;  // the next operation's tag
  Subgroups subgroups_;
  std::unique_ptr<CommQueue> queue_;  // last: destroyed first, before the context
};

}  // namespace mt::dist
