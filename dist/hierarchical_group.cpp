#include "dist/hierarchical_group.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "dist/dssync_schedule.h"

namespace mt::dist {
namespace {

std::string join(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

// Waits for one level's collective; its own Error (timeout, dead peer) names the subgroup.
void run_level(const std::shared_ptr<Work>& work, const std::string& level, const std::string& who) {
  try {
    work->wait();
  } catch (const core::Error& e) {
    MT_FAIL(who, ": hierarchical allreduce, ", level, ": ", e.what());
  }
}

}  // namespace

std::vector<int> racks_from_config(const std::vector<int>& rack, int ranks_per_rack, int world_size,
                                   const std::string& field) {
  MT_CHECK(rack.empty() || ranks_per_rack == 0, "set ", field, ".rack (one id per rank) or ", field,
           ".ranks_per_rack, not both");
  if (ranks_per_rack > 0) return racks_of_consecutive(world_size, ranks_per_rack);
  MT_CHECK(rack.empty() || static_cast<int>(rack.size()) == world_size, field, ".rack has ", rack.size(),
           " entries but the job has ", world_size, " ranks; give one rack id per rank");
  return rack;
}

HierarchicalGroup::HierarchicalGroup(std::shared_ptr<ProcessGroup> world, std::vector<int> rack_of,
                                     std::chrono::milliseconds timeout)
    : world_(std::move(world)) {
  MT_CHECK(world_ != nullptr, "hierarchical allreduce needs a process group");
  const int n = world_->size(), me = world_->rank();
  MT_CHECK(static_cast<int>(rack_of.size()) == n, "rank ", me, ": hierarchical allreduce needs the rack of "
           "every rank: got ", rack_of.size(), " rack ids for ", n, " ranks (dist.ssgd.rack or "
           "dist.ssgd.ranks_per_rack)");
  std::map<int, std::vector<int>> members;  // rack id -> its ranks, ascending
  for (int r = 0; r < n; ++r) {
    MT_CHECK(rack_of[r] >= 0, "rank ", me, ": rack id of rank ", r, " is ", rack_of[r], "; rack ids must be >= 0");
    members[rack_of[r]].push_back(r);
  }
  for (const auto& [id, ranks] : members) representatives_.push_back(ranks.front());
  std::sort(representatives_.begin(), representatives_.end());
  rack_members_ = members.at(rack_of[me]);
  rack_of_ = std::move(rack_of);

  // Each rank joins its rack's communicator first, then the representatives theirs: nobody waits
  // on a group whose members are still waiting on another, so creation cannot deadlock.
  if (rack_members_.size() > 1) rack_group_ = world_->subgroup(rack_members_);
  if (representative() && representatives_.size() > 1) cross_group_ = world_->subgroup(representatives_);
  queue_ = std::make_unique<CommQueue>("rank " + std::to_string(me) + " of " + describe(), 3 * timeout);
}

std::string HierarchicalGroup::describe() const {
  return "hierarchical (rack {" + join(rack_members_) + "}, representatives {" + join(representatives_) +
         "}) over " + world_->describe();
}

std::shared_ptr<Work> HierarchicalGroup::allreduce(Tensor& tensor, ReduceOp op) {
  Tensor t = tensor;  // shares the storage; the caller keeps it alive until wait() returns
  const std::string who = queue_->who();
  return queue_->enqueue("hierarchical allreduce of " + std::to_string(tensor.numel()) + " values",
                         [this, t, op, who]() mutable {
    if (rack_group_) run_level(rack_group_->allreduce(t, op), "in-rack reduction", who);
    if (cross_group_) run_level(cross_group_->allreduce(t, op), "cross-rack allreduce", who);
    if (rack_group_) run_level(rack_group_->broadcast(t, 0), "in-rack broadcast", who);
  });
}

}  // namespace mt::dist
