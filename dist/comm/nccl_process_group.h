// NcclProcessGroup: the ProcessGroup for CUDA tensors, on NCCL (built only with CUDA + NCCL:
// MT_WITH_NCCL).
//
// Rank 0 of each group makes an NCCL unique id and publishes it in the store; the others read
// it. Communicators are created non-blocking, so every NCCL call can be polled against the
// group timeout and, when it passes, aborted with ncclCommAbort (a blocking communicator could
// hang forever on a dead peer). Collectives run on one dedicated stream per group, after an
// event recorded on the default stream (where our kernels run), so they see finished
// gradients; each Work holds the event recorded after its collective and wait() polls it.
// NCCL allows one rank per GPU in a communicator.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

class NcclProcessGroup : public ProcessGroup {
 public:
  static std::shared_ptr<NcclProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                                  const ProcessGroupOptions& options);
  ~NcclProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  std::string describe() const override { return description_; }
  core::Device device() const override;  // the GPU the communicator was made on

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& input, Tensor& output) override;
  std::shared_ptr<Work> allgatherv(const Tensor& input, Tensor& output,
                                   const std::vector<int64_t>& counts) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output) override;
  void barrier() override;
  std::shared_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks) override;
  void release_subgroup(const std::vector<int>& ranks) override;

  struct Comm;  // the communicator, its stream and the health flag, shared with Work handles

 private:
  NcclProcessGroup(std::shared_ptr<Store> store, const ProcessGroupOptions& options, std::string prefix,
                   int rank, std::vector<int> world_ranks, int world_size);
  std::string who() const;
  // Runs `launch` (the NCCL calls) on the group's stream and returns the Work for it.
  std::shared_ptr<Work> issue(const std::string& op, const std::vector<Tensor>& keep,
                              const std::function<int()>& launch);

  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
  std::string prefix_;
  int rank_;
  int size_;
  std::vector<int> world_ranks_;
  int world_size_;
  std::string description_;
  std::shared_ptr<Comm> comm_;
  std::mutex mutex_;  // issue order = stream order
  Subgroups subgroups_;
};

}  // namespace mt::dist
