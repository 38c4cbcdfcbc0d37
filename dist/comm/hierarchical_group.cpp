#include "dist/comm/hierarchical_group.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "dist/comm/subgroups.h"

namespace mt::dist {
namespace {

// Waits for one level's collective; its own Error (timeout, dead peer) names the subgroup.
void run_level(const std::shared_ptr<Work>& work, const std::string& level, const std::string& who) {
  try {
    work->wait();
  } catch (const core::Error& e) {
    MT_FAIL(who, ": hierarchical allreduce, ", level, ": ", e.what());
  }
}

}  // namespace

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
  index_in_rack_ = static_cast<int>(std::find(rack_members_.begin(), rack_members_.end(), me) - rack_members_.begin());
  sharded_ = std::all_of(members.begin(), members.end(),
                         [&](const auto& m) { return m.second.size() == rack_members_.size(); });
  if (sharded_) {
    for (const auto& [id, ranks] : members) crossing_.push_back(ranks[static_cast<size_t>(index_in_rack_)]);
    std::sort(crossing_.begin(), crossing_.end());
  } else if (representative()) {
    crossing_ = representatives_;
  }

  // Each rank connects its rack's communicators first, then those across racks: nobody waits on
  // a group whose members are still waiting on another, so creation cannot deadlock.
  if (rack_members_.size() > 1) {
    rack_group_ = world_->subgroup(rack_members_);
    rack_gather_group_ = private_communicator(*rack_group_);
  }
  if (crossing_.size() > 1) cross_group_ = world_->subgroup(crossing_);
  const std::string who = "rank " + std::to_string(me) + " of " + describe();
  // NCCL kernels of different communicators, launched in another order on another rank, can wait
  // on each other for ever (NCCL's documentation), so on GPUs the three levels share one thread.
  const int threads = world_->device().is_cpu() ? 3 : 1;
  for (int l = 0; l < threads; ++l) queues_[l] = std::make_unique<CommQueue>(who, 3 * timeout);
  for (int l = 0; l < 3; ++l) levels_[l] = queues_[std::min(l, threads - 1)].get();
}

std::string HierarchicalGroup::describe() const {
  return "hierarchical (rack {" + join_ranks(rack_members_) + "}, representatives {" +
         join_ranks(representatives_) + "}" + (sharded_ ? ", sums in " + std::to_string(rack_members_.size()) + " shards" : "") + ") over " +
         world_->describe();
}

std::shared_ptr<Work> HierarchicalGroup::allreduce(Tensor& tensor, ReduceOp op) {
  return sharded_ && op == ReduceOp::Sum ? sharded_allreduce(tensor) : representative_allreduce(tensor, op);
}

int HierarchicalGroup::pieces_of(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(bytes / kPieceBytes, 1, kMaxPieces));
}

std::shared_ptr<Work> HierarchicalGroup::sharded_allreduce(Tensor& tensor) {
  const int64_t n = tensor.numel();
  const int pieces = pieces_of(static_cast<int64_t>(tensor.nbytes()));
  Tensor flat = tensor.reshape({n});
  std::shared_ptr<Work> last;
  // The levels run in issue order, so the last piece's allgather ends last; a failed piece breaks
  // the levels' queues, and every later piece, the last included, fails with its message.
  for (int k = 0; k < pieces; ++k) {
    const int64_t first = n * k / pieces, end = n * (k + 1) / pieces;
    last = sharded_piece(flat.narrow(0, first, end - first), n);
  }
  return last;
}

// Level l + 1 starts on its own thread once level l of the same allreduce is done; a failure of
// level l fails the levels after it with its message. The last level's Work is the caller's.
std::shared_ptr<Work> HierarchicalGroup::chain_levels(const std::string& what, std::array<Level, 3> steps) {
  std::shared_ptr<Work> before;
  for (int l = 0; l < 3; ++l) {
    before = levels_[l]->enqueue(what + ", " + steps[l].name, [before, run = std::move(steps[l].run)] {
      if (before) before->wait();
      run();
    });
  }
  return before;
}

std::shared_ptr<Work> HierarchicalGroup::sharded_piece(const Tensor& flat, int64_t total) {
  const int64_t n = flat.numel(), r = static_cast<int64_t>(rack_members_.size());
  const int64_t shard_size = (n + r - 1) / r;
  const std::string who = levels_[0]->who();
  // The levels work on whole shards: the piece itself when r divides it, else a padded copy,
  // copied back at the end.
  const bool padded = shard_size * r != n;
  Tensor whole = padded ? Tensor::zeros({shard_size * r}, flat.dtype(), flat.device()) : flat;
  Tensor shard = r > 1 ? Tensor::empty({shard_size}, flat.dtype(), flat.device()) : whole;
  return chain_levels(
      "hierarchical allreduce of " + std::to_string(total) + " values (a piece of " + std::to_string(n) + ")",
      {{{"in-rack reduce-scatter",
         [this, flat, whole, shard, padded, who] {
           if (padded) Tensor(whole).narrow(0, 0, flat.numel()).copy_(flat);
           Tensor out = shard;
           if (rack_group_) run_level(rack_group_->reduce_scatter(whole, out), "in-rack reduce-scatter", who);
         }},
        {"cross-rack allreduce of a shard",
         [this, shard, who] {
           Tensor t = shard;
           if (cross_group_) run_level(cross_group_->allreduce(t, ReduceOp::Sum), "cross-rack allreduce", who);
         }},
        {"in-rack allgather", [this, flat, whole, shard, padded, who] {
           Tensor out = whole;
           if (rack_gather_group_) run_level(rack_gather_group_->allgather(shard, out), "in-rack allgather", who);
           if (padded) Tensor(flat).copy_(whole.narrow(0, 0, flat.numel()));
         }}}});
}

std::shared_ptr<Work> HierarchicalGroup::representative_allreduce(Tensor& tensor, ReduceOp op) {
  Tensor t = tensor;  // shares the storage; the caller keeps it alive until wait() returns
  const std::string who = levels_[0]->who();
  return chain_levels(
      "hierarchical allreduce of " + std::to_string(tensor.numel()) + " values",
      {{{"in-rack reduction",
         [this, t, op, who]() mutable {
           if (rack_group_) run_level(rack_group_->allreduce(t, op), "in-rack reduction", who);
         }},
        {"cross-rack allreduce",
         [this, t, op, who]() mutable {
           // With equal racks every rank has a crossing group (its shard's); only the
           // representatives' one is theirs.
           if (cross_group_ && representative()) run_level(cross_group_->allreduce(t, op), "cross-rack allreduce", who);
         }},
        {"in-rack broadcast", [this, t, who]() mutable {
           if (rack_gather_group_) run_level(rack_gather_group_->broadcast(t, 0), "in-rack broadcast", who);
         }}}});
}

}  // namespace mt::dist
