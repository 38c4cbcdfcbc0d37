// The network side of the cost model (docs/algorithms.md section 5): how long a collective takes on
// N workers, as a LinearCost T(M) = alpha + beta * M that the DAG model (cost_model.h) plugs
// into its message tasks. Nothing here is measured; the numbers describe a network the user
// names (a config or flags), so predictions can be made for machines we do not have.
//
// Topologies
//   one level   every rank has one full-duplex link of `bandwidth` / `latency` to one switch.
//   two levels  racks (or hosts) of `ranks_per_rack` ranks; inside a rack the link above, and
//               every rack one shared full-duplex uplink of `inter_bandwidth` / `inter_latency`.
//
// Formulas (n ranks, M bytes; lat = latency, bw = bandwidth in bytes/s; r = ranks per rack,
// R = ceil(n / r) racks; lat_o, bw_o = the inter-rack link):
//   ring allreduce, one level     2(n-1) lat + 2(n-1)/n M / bw
//     (reduce-scatter then allgather: 2(n-1) steps, each moving M/n bytes over every link)
//   ring allreduce, two levels    2(n-1) max(lat, lat_o) + 2(n-1)/n M / min(bw, bw_o)
//     (the same ring laid rack by rack: every step waits for its slowest hop, and each rack's
//      uplink carries one hop, so the slowest link bounds the ring; what Gloo's ring does)
//   hierarchical allreduce        2(r-1) lat + 2(r-1)/r M / bw + 2(R-1) lat_o + 2(R-1)/R M / bw_o
//     (reduce-scatter inside the rack, r parallel rings across racks on the M/r shards, which
//      share the uplink so it moves 2(R-1)/R M in all, then allgather inside the rack), for a sum
//     in one piece; a larger one goes in p pieces (HierarchicalGroup::pieces_of) whose levels
//     overlap: with A and X the two bandwidth terms, A + X becomes (A + X) / p + (p-1) max(A, X) / p
//     (LinearCost::time; beta stays A + X per byte, the one-piece form)
//   ring allgather, one level     (n-1) lat + (n-1) P / bw        (P = each rank's payload)
//   ring allgather, two levels    (n-1) max(lat, lat_o) + (n-1) P / min(bw, bw_o)
//   hierarchical allgather        2(r-1) lat + (r-1) R P / bw + (R-1) lat_o + (R-1) r P / bw_o
//     (allgather inside the rack, r parallel rings across racks, allgather of the foreign
//      payloads inside the rack)
//   group allreduce of g ranks    a ring of g: 2(g-1) lat + 2(g-1)/g M / bw inside a rack;
//     across racks lat_o and bw_o / f, where f rings share each uplink (DS-Sync's crossing
//     phases run all groups at once: every rank of a rack is in a crossing group, f = r)
//   parameter server, one level   every worker and server one link: a message of b bytes
//     takes lat + b / bw on it (partition_cost_model.h puts N workers' copies on a server's link)
// n = 1 (or g = 1) costs nothing. A rack that is not full is costed as a full one.
#pragma once
#include <string>

#include "dist/predict/cost_model.h"
#include "dist/predict/partition_cost_model.h"

namespace mt::dist {

enum class AllreduceAlgorithm { Ring, Hierarchical };
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name);  // "ring", "hierarchical"

struct NetworkSpec {
  double bandwidth_gbps = 10.0;  // every rank's link (inside a rack), Gbit/s
  double latency_us = 10.0;      // per hop on that link, microseconds
  int ranks_per_rack = 0;        // 0: one level (all ranks on one switch)
  double inter_bandwidth_gbps = 0.0;  // a rack's uplink; two levels only
  double inter_latency_us = 0.0;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::Ring;  // two levels only
};

class NetworkModel {
 public:
  // Checks the spec (positive bandwidths, non-negative latencies); an Error names the field.
  explicit NetworkModel(NetworkSpec spec);
  const NetworkSpec& spec() const { return spec_; }

  bool two_level() const { return spec_.ranks_per_rack > 0; }
  // Racks that n ranks fill (1 on one level or when n fits in a rack).
  int racks(int n) const;

  // Allreduce of an M-byte buffer on n ranks (the whole world): T(M) per the algorithm.
  LinearCost allreduce(int n) const;
  // Ring allreduce of n ranks on the given algorithm, ignoring spec().algorithm.
  LinearCost allreduce(int n, AllreduceAlgorithm algorithm) const;
  // Allgather: T(P) with P = each rank's payload (every rank receives (n-1) P).
  LinearCost allgather(int n) const;
  // Allreduce among a group of g ranks: inside one rack, or spread over racks with
  // `rings_per_uplink` concurrent group rings sharing each rack's uplink.
  LinearCost group_allreduce(int g, bool cross_rack, int rings_per_uplink = 1) const;

  // The parameter server's links for `workers` workers and `servers` servers, one level only
  // (where the servers sit in racks is not modelled: an Error says so).
  PsLinks ps_links(int workers, int servers) const;

  // One line: "1 Gbit/s, 50 us, one level" or with the racks and the algorithm.
  std::string describe() const;

 private:
  double bytes_per_second(double gbps) const { return gbps * 1e9 / 8.0; }
  NetworkSpec spec_;
};

}  // namespace mt::dist
