#include "dist/ps/ps_partition.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/strings.h"

namespace mt::dist {
namespace {

std::string mb(double bytes) { return core::formatted("%.3g MB", bytes / (1 << 20)); }

}  // namespace

std::vector<PsPartition> plan_partitions(const std::vector<int64_t>& param_numel,
                                         const std::vector<size_t>& push_order, int64_t partition_bytes,
                                         int servers) {
  MT_CHECK(partition_bytes >= 4, "dist.ps.partition_bytes must be >= 4 (one float32), got ", partition_bytes);
  MT_CHECK(servers >= 1, "the parameter server plan needs at least one server, got ", servers);
  const int64_t per_partition = partition_bytes / 4;
  std::vector<PsPartition> plan;
  for (size_t p : push_order) {
    MT_CHECK(p < param_numel.size(), "parameter server plan: parameter index ", p, " is outside the ",
             param_numel.size(), " parameters");
    for (int64_t off = 0; off < param_numel[p]; off += per_partition)
      plan.push_back({p, off, std::min(per_partition, param_numel[p] - off), 0});
  }
  // Largest first onto the least-loaded server (LPT): stable, so every rank gets the same plan.
  std::vector<size_t> by_size(plan.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) { return plan[a].numel > plan[b].numel; });
  std::vector<int64_t> load(static_cast<size_t>(servers), 0);
  for (size_t k : by_size) {
    const auto least = std::min_element(load.begin(), load.end());
    plan[k].server = static_cast<int>(least - load.begin());
    *least += plan[k].bytes();
  }
  return plan;
}

std::vector<int64_t> bytes_per_server(const std::vector<PsPartition>& plan, int servers) {
  std::vector<int64_t> bytes(static_cast<size_t>(servers), 0);
  for (const auto& part : plan) bytes.at(static_cast<size_t>(part.server)) += part.bytes();
  return bytes;
}

std::vector<PsPushGroup> staggered_push_groups(const std::vector<PsPartition>& plan, int servers, int rounds,
                                               int worker, const std::vector<size_t>& order) {
  MT_CHECK(servers >= 1 && rounds >= 1 && worker >= 0, "staggered push groups need servers >= 1, rounds >= 1 and a "
           "worker >= 0; got ", servers, ", ", rounds, ", ", worker);
  std::vector<size_t> sequence = order;
  if (sequence.empty()) {
    sequence.resize(plan.size());
    std::iota(sequence.begin(), sequence.end(), 0);
  }
  std::vector<size_t> sorted = sequence;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    MT_CHECK(sorted[i] == i && sorted.size() == plan.size(), "staggered push groups: the order must name each of the ",
             plan.size(), " partitions once");
  // Each server's partitions (in push order) cut into `rounds` runs of about equal bytes.
  std::vector<std::vector<std::vector<size_t>>> cut(static_cast<size_t>(servers),
                                                    std::vector<std::vector<size_t>>(static_cast<size_t>(rounds)));
  const std::vector<int64_t> total = bytes_per_server(plan, servers);
  std::vector<int64_t> sent(static_cast<size_t>(servers), 0);
  for (size_t k : sequence) {
    const size_t s = static_cast<size_t>(plan[k].server);
    // The round whose share of the server's bytes this partition's middle falls in.
    const int64_t middle = sent[s] + plan[k].bytes() / 2;
    const size_t c = static_cast<size_t>(std::min<int64_t>(rounds - 1, middle * rounds / std::max<int64_t>(total[s], 1)));
    cut[s][c].push_back(k);
    sent[s] += plan[k].bytes();
  }
  std::vector<PsPushGroup> groups;
  for (int c = 0; c < rounds; ++c)
    for (int j = 0; j < servers; ++j) {
      const int s = (worker + j) % servers;
      auto& parts = cut[static_cast<size_t>(s)][static_cast<size_t>(c)];
      if (!parts.empty()) groups.push_back({s, parts});
    }
  return groups;
}

std::string describe_plan(const std::vector<PsPartition>& plan, int servers, int64_t partition_bytes) {
  std::string out = std::to_string(plan.size()) + " partitions (" + mb(static_cast<double>(partition_bytes)) + " max):";
  const auto bytes = bytes_per_server(plan, servers);
  for (int s = 0; s < servers; ++s) {
    const auto count = std::count_if(plan.begin(), plan.end(), [s](const PsPartition& p) { return p.server == s; });
    out += std::string(s ? "," : "") + " server " + std::to_string(s) + " " +
           mb(static_cast<double>(bytes[static_cast<size_t>(s)])) + " in " + std::to_string(count);
  }
  return out;
}

}  // namespace mt::dist
