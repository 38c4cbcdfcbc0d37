// NcclProcessGroup: CUDA tensors on NCCL (built with CUDA and NCCL: MT_WITH_NCCL). Communicators
// are non-blocking, so every call is polled against the timeout and aborted when it passes;
// collectives run on the group's stream after an event on the default stream. One rank per GPU.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"
#include "dist/comm/subgroups.h"

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
