#include "dist/comm/subgroups.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace mt::dist {

std::string join_ranks(const std::vector<int>& ranks, const std::string& sep) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : sep) + std::to_string(r);
  return out;
}

std::shared_ptr<ProcessGroup> Subgroups::get(const std::vector<int>& ranks, int rank,
                                             const std::vector<int>& parent_world, const std::string& parent_prefix,
                                             const std::string& who, const Make& make) {
  const std::string what = who + ": subgroup({" + join_ranks(ranks) + "})";
  MT_CHECK(!ranks.empty() && std::is_sorted(ranks.begin(), ranks.end()) &&
               std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
           what, ": ranks must be sorted and distinct");
  MT_CHECK(ranks.front() >= 0 && ranks.back() < static_cast<int>(parent_world.size()), what,
           ": ranks outside this group of ", parent_world.size());
  const auto me = std::find(ranks.begin(), ranks.end(), rank);
  MT_CHECK(me != ranks.end(), what, " does not include this rank; only the members call subgroup()");
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = groups_.find(ranks); it != groups_.end()) return it->second;
  std::vector<int> world;
  for (const int r : ranks) world.push_back(parent_world[static_cast<size_t>(r)]);
  const int generation = released_[ranks];
  const std::string prefix =
      parent_prefix + "/sub/" + join_ranks(ranks) + (generation > 0 ? "#" + std::to_string(generation) : "");
  return groups_[ranks] = make(prefix, static_cast<int>(me - ranks.begin()), std::move(world));
}

void Subgroups::release(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (groups_.erase(ranks) > 0) ++released_[ranks];
}

std::shared_ptr<ProcessGroup> private_communicator(ProcessGroup& group) {
  std::vector<int> everyone(static_cast<size_t>(group.size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  group.release_subgroup(everyone);
  std::shared_ptr<ProcessGroup> fresh = group.subgroup(everyone);
  group.release_subgroup(everyone);
  return fresh;
}

}  // namespace mt::dist
