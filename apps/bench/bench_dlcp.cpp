// DLCP's ring against Gloo's allreduce on the same ranks: one process per rank, started with
// torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), e.g. in the testbed's hosts
// (apps/scripts/netns_testbed.sh run I -- ...). Every iteration each rank allreduces the same
// number of floats with Gloo (TCP) and with DLCP's ring (UDP, dist/dlcp/); rank 0 prints the
// median and 99th percentile of the slowest rank's time of each, DLCP's loss and
// retransmissions, and the bytes this rank sent on each path.
//
//   bench_dlcp [--floats N] [--iters K] [--loss P] [--deadline-ms D] [--paths A,B] [--spray S]
//              [--bind ADDR] [--rows gloo,dlcp]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"
#include "core/tensor.h"
#include "dist/dlcp/ring_allreduce.h"
#include "dist/comm/rendezvous.h"

using Clock = std::chrono::steady_clock;
using mt::core::Tensor;

namespace {

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) try {
  uint32_t floats = 262144;
  int iters = 20;
  double loss = 0.01;
  int deadline_ms = 20;
  std::string paths, spray = "round_robin", bind, rows = "gloo,dlcp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--floats") floats = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--iters") iters = std::stoi(v);
    else if (a == "--loss") loss = std::stod(v);
    else if (a == "--deadline-ms") deadline_ms = std::stoi(v);
    else if (a == "--paths") paths = v;
    else if (a == "--spray") spray = v;
    else if (a == "--bind") bind = v;
    else if (a == "--rows") rows = v;
    else MT_FAIL("unknown option ", a, " (see the header of apps/bench/bench_dlcp.cpp)");
  }
  const mt::dist::WorldInfo world = mt::dist::world_from_env();
  mt::dist::ProcessGroupOptions po;
  po.hostname = bind;  // empty: the rendezvous binds the address that reaches the master
  po.timeout = std::chrono::seconds(60);
  const mt::dist::Rendezvous rv = mt::dist::rendezvous(world, po);
  auto& group = *rv.group;
  const int rank = group.rank(), size = group.size();

  mt::dist::dlcp::ExchangeOptions eo;
  eo.loss_bound = loss;
  eo.deadline = std::chrono::milliseconds(deadline_ms);
  eo.timeout = std::chrono::seconds(60);
  eo.spray = mt::dist::dlcp::spray_from(spray);
  std::vector<std::string> local = mt::core::split(paths, ',');
  if (local.empty()) local.push_back(po.hostname);
  auto transport = mt::dist::dlcp::connect_transport(group, local, eo);

  std::vector<float> input(floats);
  for (uint32_t i = 0; i < floats; ++i) input[i] = float((i * 7 + rank * 13) % 31) - 15.0f;
  std::vector<double> gloo_s, dlcp_s;
  mt::dist::dlcp::ExchangeStats total;
  const bool do_gloo = rows.find("gloo") != std::string::npos, do_dlcp = rows.find("dlcp") != std::string::npos;
  for (int it = 0; it < iters; ++it) {
    // The slowest rank's time: each measures its own, then a max over ranks (not timed).
    auto slowest = [&](double seconds) {
      Tensor t = Tensor::from_vector(std::vector<float>{float(seconds)}, {1});
      group.allreduce(t, mt::dist::ReduceOp::Max)->wait();
      return double(t.to_vector()[0]);
    };
    if (do_gloo) {
      Tensor t = Tensor::from_vector(input, {int64_t(floats)});
      group.barrier();
      const auto start = Clock::now();
      group.allreduce(t)->wait();
      gloo_s.push_back(slowest(std::chrono::duration<double>(Clock::now() - start).count()));
    }
    if (do_dlcp) {
      std::vector<float> v = input;
      std::vector<uint16_t> counts(floats);
      group.barrier();
      const auto start = Clock::now();
      total.add(mt::dist::dlcp::ring_allreduce(*transport, rank, size, v.data(), counts.data(), floats,
                                               static_cast<uint32_t>(it), 0));
      dlcp_s.push_back(slowest(std::chrono::duration<double>(Clock::now() - start).count()));
    }
  }
  if (rank == 0) {
    std::printf("%d ranks, %u floats (%.2f MiB), %d iterations, paths %s, spray %s, p %.3f, deadline %d ms\n", size,
                floats, floats * 4.0 / (1 << 20), iters, paths.empty() ? po.hostname.c_str() : paths.c_str(),
                spray.c_str(), loss, deadline_ms);
    if (do_gloo)
      std::printf("gloo allreduce  p50 %8.1f ms  p99 %8.1f ms\n", 1000 * percentile(gloo_s, 0.5),
                  1000 * percentile(gloo_s, 0.99));
    if (do_dlcp) {
      std::printf("dlcp ring       p50 %8.1f ms  p99 %8.1f ms  loss %.3f%%  retransmissions %.1f/iter  "
                  "deadline endings %.1f/iter\n",
                  1000 * percentile(dlcp_s, 0.5), 1000 * percentile(dlcp_s, 0.99), 100 * total.loss(),
                  double(total.retransmissions) / iters, double(total.deadline_endings) / iters);
      const auto& per_path = transport->endpoint().sent_per_path();
      for (size_t p = 0; p < per_path.size(); ++p)
        std::printf("  rank 0 path %zu (%s): %.2f MiB in %llu packets\n", p, local[p].c_str(),
                    per_path[p].bytes / double(1 << 20), static_cast<unsigned long long>(per_path[p].packets));
    }
  }
  group.barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_dlcp: %s\n", e.what());
  return 1;
}
