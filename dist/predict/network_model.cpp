#include "dist/predict/network_model.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace mt::dist {

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name) {
  if (name == "ring") return AllreduceAlgorithm::Ring;
  if (name == "hierarchical") return AllreduceAlgorithm::Hierarchical;
  MT_FAIL("unknown allreduce algorithm \"", name, "\"; valid: \"ring\", \"hierarchical\"");
}

NetworkModel::NetworkModel(NetworkSpec spec) : spec_(spec) {
  MT_CHECK(spec_.bandwidth_gbps > 0, "network bandwidth must be > 0 Gbit/s, got ", spec_.bandwidth_gbps,
           " (--bandwidth-gbps)");
  MT_CHECK(spec_.latency_us >= 0, "network latency must be >= 0 us, got ", spec_.latency_us,
           " (--latency-us)");
  MT_CHECK(spec_.ranks_per_rack >= 0, "ranks per rack must be >= 0 (0 = one level), got ",
           spec_.ranks_per_rack, " (--ranks-per-rack)");
  if (two_level()) {
    MT_CHECK(spec_.inter_bandwidth_gbps > 0, "a two-level network needs the inter-rack bandwidth > 0 "
             "Gbit/s, got ", spec_.inter_bandwidth_gbps, " (--inter-bandwidth-gbps)");
    MT_CHECK(spec_.inter_latency_us >= 0, "inter-rack latency must be >= 0 us, got ",
             spec_.inter_latency_us, " (--inter-latency-us)");
  }
}

int NetworkModel::racks(int n) const {
  if (!two_level() || n <= spec_.ranks_per_rack) return 1;
  return (n + spec_.ranks_per_rack - 1) / spec_.ranks_per_rack;
}

LinearCost NetworkModel::allreduce(int n) const { return allreduce(n, spec_.algorithm); }

LinearCost NetworkModel::allreduce(int n, AllreduceAlgorithm algorithm) const {
  MT_CHECK(n >= 1, "allreduce on ", n, " ranks: need at least 1");
  if (n == 1) return {};
  const double lat = spec_.latency_us * 1e-6, bw = bytes_per_second(spec_.bandwidth_gbps);
  const double steps = 2.0 * (n - 1);
  const int R = racks(n);
  if (R == 1) return {steps * lat, steps / n / bw};
  const double lat_o = spec_.inter_latency_us * 1e-6, bw_o = bytes_per_second(spec_.inter_bandwidth_gbps);
  if (algorithm == AllreduceAlgorithm::Ring) {
    return {steps * std::max(lat, lat_o), steps / n / std::min(bw, bw_o)};
  }
  const double r = spec_.ranks_per_rack;
  LinearCost cost(2.0 * (r - 1) * lat + 2.0 * (R - 1) * lat_o, 0.0);
  cost.in_rack_beta = 2.0 * (r - 1) / r / bw;
  cost.cross_beta = 2.0 * (R - 1) / R / bw_o;
  cost.beta = cost.in_rack_beta + cost.cross_beta;
  return cost;
}

LinearCost NetworkModel::allgather(int n) const {
  MT_CHECK(n >= 1, "allgather on ", n, " ranks: need at least 1");
  if (n == 1) return {};
  const double lat = spec_.latency_us * 1e-6, bw = bytes_per_second(spec_.bandwidth_gbps);
  const int R = racks(n);
  if (R == 1) return {(n - 1) * lat, (n - 1) / bw};
  const double lat_o = spec_.inter_latency_us * 1e-6, bw_o = bytes_per_second(spec_.inter_bandwidth_gbps);
  if (spec_.algorithm == AllreduceAlgorithm::Ring) {
    return {(n - 1) * std::max(lat, lat_o), (n - 1) / std::min(bw, bw_o)};
  }
  const double r = spec_.ranks_per_rack;
  return {2.0 * (r - 1) * lat + (R - 1) * lat_o, (r - 1) * R / bw + (R - 1) * r / bw_o};
}

LinearCost NetworkModel::group_allreduce(int g, bool cross_rack, int rings_per_uplink) const {
  MT_CHECK(g >= 1, "group allreduce on ", g, " ranks: need at least 1");
  MT_CHECK(rings_per_uplink >= 1, "group allreduce: rings per uplink must be >= 1, got ",
           rings_per_uplink);
  if (g == 1) return {};
  double lat = spec_.latency_us * 1e-6, bw = bytes_per_second(spec_.bandwidth_gbps);
  if (cross_rack && two_level()) {
    // Every hop of the group's ring pays the slower of the two links it uses.
    lat = std::max(lat, spec_.inter_latency_us * 1e-6);
    bw = std::min(bw, bytes_per_second(spec_.inter_bandwidth_gbps) / rings_per_uplink);
  }
  const double steps = 2.0 * (g - 1);
  return {steps * lat, steps / g / bw};
}

PsLinks NetworkModel::ps_links(int workers, int servers) const {
  MT_CHECK(workers >= 1 && servers >= 1, "a parameter server needs >= 1 worker and >= 1 server, got ", workers,
           " and ", servers);
  MT_CHECK(!two_level(), "the parameter server's cost is modelled on one level only (every worker and server on "
           "one switch); drop --ranks-per-rack to predict it");
  PsLinks links;
  links.workers = workers;
  links.servers = servers;
  links.latency = spec_.latency_us * 1e-6;
  links.worker_seconds_per_byte = links.server_seconds_per_byte = 1.0 / bytes_per_second(spec_.bandwidth_gbps);
  return links;
}

std::string NetworkModel::describe() const {
  std::ostringstream os;
  os << spec_.bandwidth_gbps << " Gbit/s, " << spec_.latency_us << " us";
  if (!two_level()) {
    os << ", one level (ring allreduce)";
  } else {
    os << " inside racks of " << spec_.ranks_per_rack << "; " << spec_.inter_bandwidth_gbps
       << " Gbit/s, " << spec_.inter_latency_us << " us between racks ("
       << (spec_.algorithm == AllreduceAlgorithm::Ring ? "ring" : "hierarchical") << " allreduce)";
  }
  return os.str();
}

}  // namespace mt::dist
