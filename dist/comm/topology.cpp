#include "dist/comm/topology.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

std::vector<int> racks_from_times(const std::vector<std::vector<double>>& seconds) {
  constexpr double kMinRatio = 4.0;  // slowest/fastest pair below this: one rack
  const int n = static_cast<int>(seconds.size());
  double lo = INFINITY, hi = 0.0;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      lo = std::min(lo, seconds[i][j]);
      hi = std::max(hi, seconds[i][j]);
    }
  std::vector<int> rack(static_cast<size_t>(n), 0);
  if (n < 2 || !(lo > 0.0) || hi < kMinRatio * lo) return rack;  // no clear slow link: one rack
  const double threshold = std::sqrt(lo * hi);
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (seconds[i][j] < threshold) parent[root(j)] = root(i);
  std::vector<int> id_of_root(static_cast<size_t>(n), -1);
  int next = 0;
  for (int i = 0; i < n; ++i) {
    int& id = id_of_root[root(i)];
    if (id < 0) id = next++;
    rack[i] = id;
  }
  return rack;
}

std::vector<int> measure_racks(ProcessGroup& world, const TopologyProbe& probe) {
  const int n = world.size(), me = world.rank();
  MT_CHECK(world.backend() == "gloo", "measuring racks (dist.dssync.measure_racks) works on the gloo "
           "backend only; give the racks with dist.dssync.rack or dist.dssync.ranks_per_rack");
  MT_CHECK(probe.repetitions >= 1 && probe.message_floats >= 1,
           "topology probe: repetitions and message size must be >= 1");
  std::vector<float> row(static_cast<size_t>(n), 0.0f);  // my time to every other rank
  // Circle method: with an even count m (a dummy rank when n is odd), round k pairs position p
  // with position m-1-p of the rotated list; every pair meets exactly once in m-1 rounds.
  const int m = n % 2 == 0 ? n : n + 1;
  std::vector<int> order(static_cast<size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  for (int round = 0; round < m - 1; ++round) {
    for (int p = 0; p < m / 2; ++p) {
      const int a = order[p], b = order[m - 1 - p];
      if (a >= n || b >= n || (a != me && b != me)) continue;  // a bye, or not my pair
      const int other = a == me ? b : a;
      auto pair = world.subgroup({std::min(a, b), std::max(a, b)});
      Tensor t = Tensor::ones({probe.message_floats}, core::DType::Float32, pair->device());
      std::vector<double> times;
      for (int r = 0; r <= probe.repetitions; ++r) {
        const auto start = std::chrono::steady_clock::now();
        finish(pair->allreduce(t), *pair, "the topology probe with rank " + std::to_string(other));
        if (r > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      // The fastest repetition: load on the machine only ever adds time, so the minimum is the
      // link's own speed.
      row[static_cast<size_t>(other)] = static_cast<float>(*std::min_element(times.begin(), times.end()));
      // Done with this pair: its connections and thread go now, not at the end of the run.
      pair.reset();
      world.release_subgroup({std::min(a, b), std::max(a, b)});
    }
    std::rotate(order.begin() + 1, order.begin() + m - 1, order.end());  // position 0 stays
  }
  Tensor mine = Tensor::from_vector(row, {n}).to(world.device());
  Tensor all = Tensor::empty({static_cast<int64_t>(n) * n}, core::DType::Float32, world.device());
  finish(world.allgather(mine, all), world, "gathering the topology probe's times");
  const std::vector<float> flat = all.to_vector();
  std::vector<std::vector<double>> seconds(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)  // both ends timed the same pair: the faster view, as above
      seconds[i][j] = std::min(flat[static_cast<size_t>(i * n + j)], flat[static_cast<size_t>(j * n + i)]);
  return racks_from_times(seconds);
}

std::vector<int> racks_of_consecutive(int world, int ranks_per_rack) {
  std::vector<int> rack_of;
  if (ranks_per_rack > 0)
    for (int r = 0; r < world; ++r) rack_of.push_back(r / ranks_per_rack);
  return rack_of;
}

std::vector<int> racks_from_config(const std::vector<int>& rack, int ranks_per_rack, int world_size,
                                   const std::string& field) {
  MT_CHECK(rack.empty() || ranks_per_rack == 0, "set ", field, ".rack (one id per rank) or ", field,
           ".ranks_per_rack, not both");
  if (ranks_per_rack > 0) return racks_of_consecutive(world_size, ranks_per_rack);
  MT_CHECK(rack.empty() || static_cast<int>(rack.size()) == world_size, field, ".rack has ", rack.size(),
           " entries but the job has ", world_size, " ranks; give one rack id per rank");
  return rack;
}

}  // namespace mt::dist
