#include "dist/dssync/dssync_schedule.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"

namespace mt::dist {
namespace {

// splitmix64: a fixed, portable mix (std::hash and std::uniform_int_distribution may differ
// between standard libraries, and all ranks must draw the same numbers).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Partition normalized(Partition p) {
  for (auto& g : p) std::sort(g.begin(), g.end());
  std::sort(p.begin(), p.end());
  return p;
}

// Ranks as local indices 0..n-1 of `members` -> the members' ranks.
Partition mapped(const Partition& local, const std::vector<int>& members) {
  Partition out;
  for (const auto& g : local) {
    RankGroup m;
    for (int i : g) m.push_back(members[static_cast<size_t>(i)]);
    out.push_back(m);
  }
  return out;
}

int64_t lcm64(int64_t a, int64_t b) { return a / std::gcd(a, b) * b; }

// Whether `group` holds ranks of more than one rack.
bool spans(const RankGroup& group, const std::vector<int>& rack_of) {
  return std::any_of(group.begin(), group.end(), [&](int r) { return rack_of[r] != rack_of[group[0]]; });
}

// The groups of `phase` that span more than one rack, in the phase's order.
std::vector<RankGroup> crossing_groups(const Partition& phase, const std::vector<int>& rack_of) {
  std::vector<RankGroup> out;
  std::copy_if(phase.begin(), phase.end(), std::back_inserter(out),
               [&](const RankGroup& g) { return spans(g, rack_of); });
  return out;
}

// A crossing iteration where at most `per_rack` ranks of each rack cross: the crossing groups of
// `phase`, starting with the one at `first`, each cut to the ranks its racks still have room
// for (in the group's order) and kept if it still spans two racks; every other rank averages
// with the other left-over ranks of its group in `intra`.
Partition limited_crossing(const Partition& phase, const Partition& intra, const std::vector<int>& rack_of,
                           int per_rack, size_t first) {
  const std::vector<RankGroup> crossing = crossing_groups(phase, rack_of);
  std::map<int, int> room;  // rack id -> ranks it may still send across
  for (int id : rack_of) room[id] = per_rack;
  std::vector<bool> placed(rack_of.size(), false);
  Partition p;
  for (size_t i = 0; i < crossing.size(); ++i) {
    const RankGroup& grp = crossing[(first + i) % crossing.size()];
    std::map<int, int> taken;
    RankGroup kept;
    for (int r : grp)
      if (taken[rack_of[r]] < room[rack_of[r]]) {
        ++taken[rack_of[r]];
        kept.push_back(r);
      }
    const auto racks_spanned = std::count_if(taken.begin(), taken.end(), [](const auto& e) { return e.second > 0; });
    if (racks_spanned < 2) continue;  // what is left of it stays inside one rack
    for (const auto& [rack, k] : taken) room[rack] -= k;
    for (int r : kept) placed[static_cast<size_t>(r)] = true;
    p.push_back(kept);
  }
  for (const auto& grp : intra) {
    RankGroup rest;
    for (int r : grp)
      if (!placed[static_cast<size_t>(r)]) rest.push_back(r);
    if (!rest.empty()) p.push_back(rest);
  }
  return normalized(p);
}

}  // namespace

std::vector<std::string> dssync_schedule_types() { return {"butterfly", "random"}; }

std::vector<Partition> butterfly_phases(int n, int g) {
  MT_CHECK(g >= 2, "dist.dssync.group_size must be >= 2, got ", g);
  MT_CHECK(n >= 1, "DS-Sync needs at least one rank, got ", n);
  int m = 0;
  int64_t power = 1;
  while (power < n) {
    power *= g;
    ++m;
  }
  MT_CHECK(power == n, "the pure butterfly needs N = g^m ranks; ", n, " is not a power of ", g,
           " (use folded_butterfly_phases)");
  std::vector<Partition> phases;
  int64_t stride = 1;  // g^p: the weight of digit p
  for (int p = 0; p < m; ++p, stride *= g) {
    Partition part;
    for (int r = 0; r < n; ++r) {
      if ((r / stride) % g != 0) continue;  // r is the member with digit p = 0: its group's leader
      RankGroup grp;
      for (int d = 0; d < g; ++d) grp.push_back(static_cast<int>(r + d * stride));
      part.push_back(grp);
    }
    phases.push_back(normalized(part));
  }
  return phases;
}

std::vector<Partition> folded_butterfly_phases(int n, int g) {
  MT_CHECK(g >= 2, "dist.dssync.group_size must be >= 2, got ", g);
  MT_CHECK(n >= 1, "DS-Sync needs at least one rank, got ", n);
  int64_t M = 1;
  while (M * g <= n) M *= g;
  if (M == n) return butterfly_phases(n, g);
  // Fold: {j, j+M, j+2M, ...}; at most g members because n < g*M.
  Partition fold;
  for (int j = 0; j < M; ++j) {
    RankGroup grp;
    for (int64_t r = j; r < n; r += M) grp.push_back(static_cast<int>(r));
    fold.push_back(grp);
  }
  std::vector<Partition> phases = {normalized(fold)};
  for (Partition p : butterfly_phases(static_cast<int>(M), g)) {
    for (int r = static_cast<int>(M); r < n; ++r) p.push_back({r});  // the extras sit alone
    phases.push_back(normalized(p));
  }
  return phases;
}

void check_partition(const Partition& partition, int n) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (const auto& grp : partition) {
    MT_CHECK(!grp.empty(), "partition ", partition_str(partition), " has an empty group");
    for (size_t i = 0; i < grp.size(); ++i) {
      MT_CHECK(grp[i] >= 0 && grp[i] < n, "partition ", partition_str(partition), ": rank ", grp[i],
               " is outside the world of ", n);
      MT_CHECK(i == 0 || grp[i] > grp[i - 1], "partition ", partition_str(partition),
               ": groups must be sorted and distinct");
      ++seen[static_cast<size_t>(grp[i])];
    }
  }
  for (int r = 0; r < n; ++r)
    MT_CHECK(seen[static_cast<size_t>(r)] == 1, "partition ", partition_str(partition), ": rank ", r,
             " is in ", seen[static_cast<size_t>(r)], " groups (must be exactly one)");
}

std::string partition_str(const Partition& partition) {
  std::ostringstream s;
  for (const auto& grp : partition) {
    s << '{';
    for (size_t i = 0; i < grp.size(); ++i) s << (i ? "," : "") << grp[i];
    s << '}';
  }
  return s.str();
}

DsSyncSchedule::DsSyncSchedule(DsSyncScheduleOptions options) : options_(std::move(options)) {
  const int n = options_.world_size, g = options_.group_size;
  MT_CHECK(n >= 1, "DS-Sync needs at least one rank, got a world of ", n);
  MT_CHECK(g >= 2, "dist.dssync.group_size must be >= 2 (the ranks that average together), got ", g);
  MT_CHECK(options_.cross_period >= 1, "dist.dssync.cross_period must be >= 1, got ",
           options_.cross_period);
  MT_CHECK(options_.cross_ranks_per_rack >= 0, "dist.dssync.cross_ranks_per_rack must be >= 0 (0 = no "
           "limit), got ", options_.cross_ranks_per_rack);
  const auto& types = dssync_schedule_types();
  MT_CHECK(std::find(types.begin(), types.end(), options_.type) != types.end(),
           "unknown dist.dssync.schedule \"", options_.type, "\"; valid: \"butterfly\", \"random\"");
  if (!options_.rack_of.empty()) {
    MT_CHECK(static_cast<int>(options_.rack_of.size()) == n, "dist.dssync.rack has ",
             options_.rack_of.size(), " entries but the world has ", n,
             " ranks; give one rack id per rank (or use dist.dssync.ranks_per_rack)");
    for (int r = 0; r < n; ++r)
      MT_CHECK(options_.rack_of[r] >= 0, "dist.dssync.rack: rank ", r, " has rack id ",
               options_.rack_of[r], "; rack ids must be >= 0");
  }
  std::set<int> racks(options_.rack_of.begin(), options_.rack_of.end());
  // Crossing every iteration with a limit would leave the in-rack averaging only the ranks not
  // crossing, which can cut the world in two (8 ranks in two racks, 2 crossing): refused.
  MT_CHECK(racks.size() <= 1 || options_.cross_period > 1 || options_.cross_ranks_per_rack == 0,
           "the racks are known and dist.dssync.cross_period is 1: every iteration would cross racks, and the "
           "crossing limit dist.dssync.cross_ranks_per_rack (default 1) would cut the in-rack averaging; set "
           "cross_period: 2 or more, or cross_ranks_per_rack: 0 for the plain butterfly");
  const bool bottleneck = racks.size() > 1 && options_.cross_period > 1;

  auto add = [&](const Partition& p) {
    check_partition(p, n);
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i] == p) return i;
    pool_.push_back(p);
    return pool_.size() - 1;
  };

  if (options_.type == "random") {
    MT_CHECK(!bottleneck, "dist.dssync.cross_period > 1 (bottleneck awareness) needs "
             "dist.dssync.schedule \"butterfly\"; the random schedule ignores racks");
    MT_CHECK(options_.pool_size >= 1, "dist.dssync.pool_size must be >= 1, got ", options_.pool_size);
    std::mt19937_64 rng(mix(options_.seed));  // mt19937_64's sequence is fixed by the standard
    for (int k = 0; k < options_.pool_size; ++k) {
      std::vector<int> perm(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      for (int i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng() % static_cast<uint64_t>(i + 1)]);
      Partition p;
      for (int i = 0; i < n; i += g)
        p.emplace_back(perm.begin() + i, perm.begin() + std::min(n, i + g));
      sequence_.push_back(add(normalized(p)));
    }
    cycle_ = options_.pool_size;
  } else if (!bottleneck) {
    for (const auto& p : folded_butterfly_phases(n, g)) sequence_.push_back(add(p));
    cycle_ = static_cast<int64_t>(sequence_.size());
  } else {
    // Intra-rack phases: each rack's own folded butterfly, all racks at once (a rack with a
    // shorter cycle repeats its phases).
    std::map<int, std::vector<int>> members;
    for (int r = 0; r < n; ++r) members[options_.rack_of[r]].push_back(r);
    std::vector<std::vector<Partition>> rack_phases;
    int64_t a = 1;
    for (const auto& [rack, ranks] : members) {
      rack_phases.push_back(folded_butterfly_phases(static_cast<int>(ranks.size()), g));
      for (auto& p : rack_phases.back()) p = mapped(p, ranks);
      if (rack_phases.back().empty()) rack_phases.back().push_back({{ranks[0]}});  // one-rank rack
      a = lcm64(a, static_cast<int64_t>(rack_phases.back().size()));
    }
    std::vector<Partition> intra;
    for (int64_t k = 0; k < a; ++k) {
      Partition p;
      for (const auto& phases : rack_phases) {
        const auto& q = phases[static_cast<size_t>(k) % phases.size()];
        p.insert(p.end(), q.begin(), q.end());
      }
      intra.push_back(normalized(p));
    }
    // Cross phases: the world's folded-butterfly phases whose groups cross racks.
    std::vector<Partition> cross;
    for (const auto& p : folded_butterfly_phases(n, g))
      if (crosses_racks(p)) cross.push_back(p);
    const int64_t cp = options_.cross_period;
    const int64_t b = static_cast<int64_t>(cross.size());
    const bool limited = options_.cross_ranks_per_rack > 0;
    // Limited crossing starts each pass over the crossing phases one crossing group further on.
    int64_t turns = 1;
    if (limited)
      for (const auto& p : cross) turns = lcm64(turns, static_cast<int64_t>(crossing_groups(p, options_.rack_of).size()));
    cycle_ = b == 0 ? a : cp * lcm64(a, b * turns);
    for (int64_t t = 0; t < cycle_; ++t) {
      const int64_t k = t / cp, r = t % cp;
      const int64_t intra_index = b == 0 ? t : k * (cp - 1) + r;  // intra iterations so far
      if (b > 0 && r == cp - 1) {
        const Partition& phase = cross[static_cast<size_t>(k % b)];
        sequence_.push_back(add(limited ? limited_crossing(phase, intra[static_cast<size_t>(intra_index % a)],
                                                           options_.rack_of, options_.cross_ranks_per_rack,
                                                           static_cast<size_t>(k / b))
                                        : phase));
      } else {
        sequence_.push_back(add(intra[static_cast<size_t>(intra_index % a)]));
      }
    }
  }
  if (pool_.empty()) {  // a world of one (or a schedule with no phase): everyone alone
    Partition alone;
    for (int r = 0; r < n; ++r) alone.push_back({r});
    sequence_.push_back(add(alone));
    cycle_ = 1;
  }
  position_.assign(pool_.size(), std::vector<int>(static_cast<size_t>(n), -1));
  for (size_t i = 0; i < pool_.size(); ++i)
    for (size_t gi = 0; gi < pool_[i].size(); ++gi)
      for (int r : pool_[i][gi]) position_[i][static_cast<size_t>(r)] = static_cast<int>(gi);
}

size_t DsSyncSchedule::index_at(int64_t iteration) const {
  MT_CHECK(iteration >= 0, "DS-Sync schedule asked for iteration ", iteration);
  if (options_.type == "random") {
    return sequence_[mix(options_.seed ^ mix(static_cast<uint64_t>(iteration))) % sequence_.size()];
  }
  return sequence_[static_cast<size_t>(iteration % cycle_)];
}

const Partition& DsSyncSchedule::at(int64_t iteration) const { return pool_[index_at(iteration)]; }

const RankGroup& DsSyncSchedule::group_of(int64_t iteration, int rank) const {
  MT_CHECK(rank >= 0 && rank < options_.world_size, "rank ", rank, " is outside the world of ",
           options_.world_size);
  const size_t i = index_at(iteration);
  return pool_[i][static_cast<size_t>(position_[i][static_cast<size_t>(rank)])];
}

std::vector<RankGroup> DsSyncSchedule::distinct_groups() const {
  std::set<RankGroup> groups;
  for (const auto& p : pool_)
    for (const auto& grp : p)
      if (grp.size() >= 2) groups.insert(grp);
  return {groups.begin(), groups.end()};
}

bool DsSyncSchedule::crosses_racks(const Partition& partition) const {
  return std::any_of(partition.begin(), partition.end(), [&](const RankGroup& g) { return spans_racks(g); });
}

bool DsSyncSchedule::spans_racks(const RankGroup& group) const {
  return !options_.rack_of.empty() && spans(group, options_.rack_of);
}

std::string DsSyncSchedule::describe() const {
  std::ostringstream s;
  s << "DS-Sync schedule: " << options_.type << ", group size " << options_.group_size << ", "
    << options_.world_size << " ranks";
  if (options_.type == "random") {
    s << ", seed " << options_.seed << ", pool of " << pool_.size() << " partitions";
  } else {
    s << ", cycle of " << cycle_ << " iterations";
  }
  if (!options_.rack_of.empty() && options_.cross_period > 1) {
    s << ", cross-rack groups every " << options_.cross_period << " iterations (racks";
    for (int r : options_.rack_of) s << ' ' << r;
    s << "), ";
    if (options_.cross_ranks_per_rack > 0) {
      s << "at most " << options_.cross_ranks_per_rack << " rank(s) of a rack crossing at once";
    } else {
      s << "every rank of a crossing phase crossing";
    }
  }
  s << '\n';
  const int64_t shown = std::min<int64_t>(cycle_, 16);
  for (int64_t t = 0; t < shown; ++t) {
    s << (options_.type == "random" ? "  t = " : "  t mod " + std::to_string(cycle_) + " = ") << t
      << ": " << partition_str(at(t))
      << (crosses_racks(at(t)) ? "  (crosses racks)" : "") << '\n';
  }
  if (shown < cycle_) s << "  ... (" << cycle_ - shown << " more)\n";
  return s.str();
}

}  // namespace mt::dist
