// DS-Sync schedules (docs/algorithms.md section 3): for every iteration t, a partition of the N ranks
// into disjoint groups; the ranks of a group average their models after that iteration's local
// step. A schedule is a pure function of t (and of a seed shared by all ranks), so every rank
// computes the same partition without talking, and a resumed run continues exactly where it
// stopped from the iteration number alone.
//
//   butterfly  N = g^m: phase p = t mod m groups the ranks whose base-g digits agree everywhere
//              except digit p. After the m phases every rank's information has reached every
//              other (any m consecutive phases cover all digits).
//              Other N ("folded butterfly"): M = g^m is the largest power <= N; the R = N - M
//              extra ranks are folded onto the first ones by a phase F whose groups are
//              {j, j+M, j+2M, ...} (size <= g since N < gM). The cycle is F, B_0 .. B_{m-1}
//              (butterfly on ranks 0..M-1; extra ranks sit alone there). Any window of
//              2(m+1) iterations holds F, all of B, then F again: the extras' information goes
//              in, spreads over the butterfly and comes back out, so it reaches every rank.
//   random     a pool of `pool_size` partitions (random permutations cut into blocks of g) is
//              drawn at start from the shared seed; iteration t uses pool[hash(seed, t) mod
//              pool_size]. Coverage holds with high probability, not by construction.
//
// Bottleneck awareness: given the rack of every rank and cross_period > 1, iterations
// t with t mod cross_period == cross_period - 1 use the base schedule's phases that cross racks
// (in turn); all other iterations use groups inside racks (the folded butterfly of each rack's
// ranks, all racks at once). Slow inter-rack links are then used once per cross_period
// iterations; tests check how long information takes to reach everyone.
// In a crossing iteration at most cross_ranks_per_rack ranks of each rack cross (the uplink's
// capacity in flows): the crossing groups of the base phase are taken in turn (a different one
// first in each crossing iteration, so every rank gets to represent its rack), each cut to the
// ranks its racks still have room for, and kept while it still spans two racks; every rank left
// over averages in its group of the intra-rack phase, cut to the ranks left over.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm/topology.h"

namespace mt::dist {

using RankGroup = std::vector<int>;          // sorted ranks
using Partition = std::vector<RankGroup>;    // disjoint groups covering 0..N-1 (singletons included)

struct DsSyncScheduleOptions {
  int world_size = 1;
  int group_size = 2;
  std::string type = "butterfly";  // "butterfly" (folded for N != g^m) or "random"
  uint64_t seed = 0;               // random: the shared seed
  int pool_size = 16;              // random: partitions prepared at start
  std::vector<int> rack_of;        // rack id of every rank; empty = one rack
  int cross_period = 1;            // > 1 with several racks: cross-rack groups every that many iterations
  int cross_ranks_per_rack = 1;    // ranks of a rack crossing per crossing iteration; 0 = no limit
};

std::vector<std::string> dssync_schedule_types();  // "butterfly", "random"


// The pure butterfly; n must be a power of g (Error otherwise). n = 1: no phase.
std::vector<Partition> butterfly_phases(int n, int g);
// The folded butterfly for any n >= 1 (the pure butterfly when n is a power of g).
std::vector<Partition> folded_butterfly_phases(int n, int g);

// Checks that groups are disjoint, sorted and cover 0..n-1; Error naming the problem otherwise.
void check_partition(const Partition& partition, int n);
std::string partition_str(const Partition& partition);  // "{0,1}{2,3}"

class DsSyncSchedule {
 public:
  explicit DsSyncSchedule(DsSyncScheduleOptions options);

  const Partition& at(int64_t iteration) const;
  // The group of `rank` at `iteration`.
  const RankGroup& group_of(int64_t iteration, int rank) const;
  // Every partition the schedule can return, in a fixed order (the same on every rank).
  const std::vector<Partition>& partitions() const { return pool_; }
  // Every distinct group of >= 2 ranks, sorted: the global order in which communicators are made.
  std::vector<RankGroup> distinct_groups() const;
  // at(t) == at(t + cycle()) for butterfly schedules; for random, pool_size (not a true cycle).
  int64_t cycle() const { return cycle_; }
  bool crosses_racks(const Partition& partition) const;
  bool spans_racks(const RankGroup& group) const;  // members in two racks or more
  int world_size() const { return options_.world_size; }
  const DsSyncScheduleOptions& options() const { return options_; }
  std::string describe() const;  // multi-line, for the start-up log

 private:
  size_t index_at(int64_t iteration) const;

  DsSyncScheduleOptions options_;
  std::vector<Partition> pool_;   // distinct partitions
  std::vector<size_t> sequence_;  // butterfly/bottleneck: pool index per t mod cycle
  int64_t cycle_ = 1;
  std::vector<std::vector<int>> position_;  // [pool index][rank] -> group index in that partition
};

}  // namespace mt::dist
