// HierarchicalGroup (README.md): a ProcessGroup whose sum allreduce goes in three levels for
// racks joined by a slower uplink: reduce-scatter inside each rack, each shard allreduced across
// racks by the ranks holding it, allgather inside the rack (racks of unequal size, and max/min,
// through one representative per rack). Each level has its own queue and communicator, so one
// bucket crosses while the next is reduced; everything else is the world's. Collective to build.
#pragma once
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/comm_queue.h"
#include "dist/comm/process_group.h"
#include "dist/comm/topology.h"

namespace mt::dist {

class HierarchicalGroup final : public ProcessGroup {
 public:
  // rack_of[r]: the rack id of world rank r (any non-negative ids; one entry per rank).
  // `timeout`: the world's per-operation timeout; an allreduce here is given three of them.
  HierarchicalGroup(std::shared_ptr<ProcessGroup> world, std::vector<int> rack_of,
                    std::chrono::milliseconds timeout);

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  std::string backend() const override { return world_->backend(); }
  core::Device device() const override { return world_->device(); }
  std::string describe() const override;

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root) override { return world_->broadcast(tensor, root); }
  std::shared_ptr<Work> allgather(const Tensor& input, Tensor& output) override {
    return world_->allgather(input, output);
  }
  std::shared_ptr<Work> allgatherv(const Tensor& input, Tensor& output,
                                   const std::vector<int64_t>& counts) override {
    return world_->allgatherv(input, output, counts);
  }
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output) override {
    return world_->reduce_scatter(input, output);
  }
  void barrier() override { world_->barrier(); }
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, uint32_t tag) override {
    return world_->send(tensor, peer, tag);
  }
  std::shared_ptr<Work> recv(Tensor& tensor, int peer, uint32_t tag) override {
    return world_->recv(tensor, peer, tag);
  }
  std::shared_ptr<ProcessGroup> subgroup(const std::vector<int>& ranks) override {
    return world_->subgroup(ranks);
  }
  void release_subgroup(const std::vector<int>& ranks) override { world_->release_subgroup(ranks); }

  // The world ranks of this rank's rack (sorted); its representative is the first.
  const std::vector<int>& rack() const { return rack_members_; }
  // Whether sums travel in shards (racks of equal size), and the world ranks this rank's level-2
  // allreduce goes to: those of its index in every rack (sharded), else the representatives.
  bool sharded() const { return sharded_; }
  const std::vector<int>& crossing() const { return crossing_; }
  // How many pieces a sharded sum of `bytes` goes in: pieces of at least kPieceBytes, so that a
  // piece's start-up stays small against its transfer, and at most kMaxPieces, so that the
  // queues' per-piece work stays bounded for large tensors.
  static constexpr int64_t kPieceBytes = 256 << 10;
  static constexpr int kMaxPieces = 8;
  static int pieces_of(int64_t bytes);
  bool representative() const { return rack_members_.front() == rank(); }
  // The representatives of all racks (the members of the cross-rack allreduce), sorted.
  const std::vector<int>& representatives() const { return representatives_; }
  // The rack id of every world rank, as given.
  const std::vector<int>& rack_of() const { return rack_of_; }

 private:
  struct Level {
    std::string name;           // in errors: "in-rack reduce-scatter"
    std::function<void()> run;  // issues the level's collective and waits for it
  };
  std::shared_ptr<Work> chain_levels(const std::string& what, std::array<Level, 3> steps);
  std::shared_ptr<Work> sharded_allreduce(Tensor& tensor);
  std::shared_ptr<Work> sharded_piece(const Tensor& flat, int64_t total);
  std::shared_ptr<Work> representative_allreduce(Tensor& tensor, ReduceOp op);

  std::shared_ptr<ProcessGroup> world_;
  std::vector<int> rack_of_;
  std::vector<int> rack_members_;
  std::vector<int> representatives_;
  std::vector<int> crossing_;
  bool sharded_ = false;
  int index_in_rack_ = 0;
  // Null when the rack is this rank alone; level 1 and level 3 each their own communicator,
  // since their threads issue at once.
  std::shared_ptr<ProcessGroup> rack_group_;
  std::shared_ptr<ProcessGroup> rack_gather_group_;
  std::shared_ptr<ProcessGroup> cross_group_;  // level 2; null when this rank does not cross
  CommQueue* levels_[3] = {};                  // level l's thread: one of queues_
  std::unique_ptr<CommQueue> queues_[3];       // last: destroyed first, before the groups
};

}  // namespace mt::dist
