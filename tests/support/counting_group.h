// A process group that passes every operation to the one it wraps and counts it, per group and
// operation ("broadcast {0,2}" -> 2); the subgroups it makes count into the same tally. Tests use
// it to see which collectives an algorithm issued and over which ranks (e.g. that a hierarchical
// allreduce sends nothing over the flat world, or that identical start-up weights are not
// broadcast).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::testing {

// "0,2,3": the members of a group, as the tally names it.
inline std::string join_ranks(const std::vector<int>& ranks) {
  std::string m;
  for (int r : ranks) {
    if (!m.empty()) m += ',';
    m += std::to_string(r);
  }
  return m;
}

// "0,1,...,n-1": the world of n ranks.
inline std::string world_members(int n) {
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  return join_ranks(all);
}

// Collectives issued, per group (its member list) and operation: "allreduce {0,2}" -> count.
struct Tally {
  std::mutex mutex;
  std::map<std::string, int> issued;
  std::vector<int64_t> allreduced;  // every allreduce's number of values, in the order issued
  void add(const std::string& op, const std::string& members) {
    std::lock_guard<std::mutex> lock(mutex);
    ++issued[op + " {" + members + "}"];
  }
  int of(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = issued.find(key);
    return it == issued.end() ? 0 : it->second;
  }
  // Every count of operation `op` ("broadcast"), whatever the group.
  int all_of(const std::string& op) {
    std::lock_guard<std::mutex> lock(mutex);
    int n = 0;
    for (const auto& [key, count] : issued)
      if (key.rfind(op + " {", 0) == 0) n += count;
    return n;
  }
};

// Passes every operation to `inner` and counts it; its subgroups count into the same tally.
class CountingGroup final : public dist::ProcessGroup {
 public:
  CountingGroup(std::shared_ptr<dist::ProcessGroup> inner, std::string members, std::shared_ptr<Tally> tally)
      : inner_(std::move(inner)), members_(std::move(members)), tally_(std::move(tally)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  core::Device device() const override { return inner_->device(); }
  std::string describe() const override { return inner_->describe(); }
  std::shared_ptr<dist::Work> allreduce(core::Tensor& t, dist::ReduceOp op) override {
    tally_->add("allreduce", members_);
    {
      std::lock_guard<std::mutex> lock(tally_->mutex);
      tally_->allreduced.push_back(t.numel());
    }
    return inner_->allreduce(t, op);
  }
  std::shared_ptr<dist::Work> broadcast(core::Tensor& t, int root) override {
    tally_->add("broadcast", members_);
    return inner_->broadcast(t, root);
  }
  std::shared_ptr<dist::Work> allgather(const core::Tensor& in, core::Tensor& out) override {
    tally_->add("allgather", members_);
    return inner_->allgather(in, out);
  }
  std::shared_ptr<dist::Work> allgatherv(const core::Tensor& in, core::Tensor& out,
                                         const std::vector<int64_t>& counts) override {
    tally_->add("allgatherv", members_);
    return inner_->allgatherv(in, out, counts);
  }
  std::shared_ptr<dist::Work> reduce_scatter(const core::Tensor& in, core::Tensor& out) override {
    tally_->add("reduce_scatter", members_);
    return inner_->reduce_scatter(in, out);
  }
  void barrier() override {
    tally_->add("barrier", members_);
    inner_->barrier();
  }
  std::shared_ptr<dist::Work> send(const core::Tensor& t, int peer, uint32_t tag) override {
    tally_->add("send", members_);
    return inner_->send(t, peer, tag);
  }
  std::shared_ptr<dist::Work> recv(core::Tensor& t, int peer, uint32_t tag) override {
    tally_->add("recv", members_);
    return inner_->recv(t, peer, tag);
  }
  // Named by the world's ranks: a subgroup of a subgroup maps its ranks through its parent's.
  std::shared_ptr<dist::ProcessGroup> subgroup(const std::vector<int>& ranks) override {
    std::vector<int> parent, world;
    std::stringstream list(members_);
    for (std::string r; std::getline(list, r, ',');) parent.push_back(std::stoi(r));
    for (int r : ranks) world.push_back(parent.at(static_cast<size_t>(r)));
    return std::make_shared<CountingGroup>(inner_->subgroup(ranks), join_ranks(world), tally_);
  }
  void release_subgroup(const std::vector<int>& ranks) override { inner_->release_subgroup(ranks); }

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
  std::string members_;
  std::shared_ptr<Tally> tally_;
};

}  // namespace mt::testing
