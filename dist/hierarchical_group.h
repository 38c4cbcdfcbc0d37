// HierarchicalGroup: a ProcessGroup whose allreduce goes in three levels for ranks in racks
// joined by a slower uplink (the baseline DS-Sync's paper compares against, docs/algorithms.md):
//
//   1. inside each rack: allreduce on the rack's communicator (the ProcessGroup has no reduce;
//      an in-rack ring moves the same 2(r-1)/r M per rank as reduce + broadcast would on the fast
//      links, and leaves the rack's sum on its representative);
//   2. across racks: allreduce among the representatives only (the lowest rank of each rack), so
//      each rack sends one flow of M bytes over the uplink instead of r;
//   3. inside each rack: broadcast from the representative.
//
// Every other operation (broadcast, allgather, send, subgroups, ...) is the world's own, so a
// synchronizer given this group in place of the world changes only how its allreduces travel.
//
// The three levels of one allreduce run one after the other on this group's own thread
// (comm_queue.h), one allreduce after the other in issue order. Issue order is the same on every
// rank, so every rack and cross-rack communicator sees its collectives in the same order on all
// its members: a level-1 collective of a later allreduce can never overtake the level-3
// broadcast of an earlier one. The caller gets its Work at once and overlaps as with the world.
//
// The rack and cross-rack communicators are connected in the constructor (collectively: every
// rank of the world constructs it with the same racks).
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm_queue.h"
#include "dist/process_group.h"

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
  bool representative() const { return rack_members_.front() == rank(); }
  // The representatives of all racks (the members of the cross-rack allreduce), sorted.
  const std::vector<int>& representatives() const { return representatives_; }
  // The rack id of every world rank, as given.
  const std::vector<int>& rack_of() const { return rack_of_; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  std::vector<int> rack_of_;
  std::vector<int> rack_members_;
  std::vector<int> representatives_;
  std::shared_ptr<ProcessGroup> rack_group_;   // null when the rack is this rank alone
  std::shared_ptr<ProcessGroup> cross_group_;  // null unless a representative with 2+ racks
  std::unique_ptr<CommQueue> queue_;           // last: destroyed first, before the groups
};

// Racks from a config: `rack` (one id per rank) when given, else `ranks_per_rack` consecutive
// ranks per rack; `field` names the config message in errors ("dist.ssgd").
std::vector<int> racks_from_config(const std::vector<int>& rack, int ranks_per_rack, int world_size,
                                   const std::string& field);

}  // namespace mt::dist
