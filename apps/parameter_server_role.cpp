#include "apps/parameter_server_role.h"

#include <chrono>
#include <csignal>
#include <ostream>

#include "core/error.h"
#include "dist/registry.h"

namespace mt::apps {

int run_parameter_server(const mintrain::RunConfig& config, const dist::WorldInfo& world, std::ostream& log) {
  const mintrain::DistConfig& dc = config.dist();
  const std::string who = "parameter server " + std::to_string(world.server_index()) + " (rank " +
                          std::to_string(world.rank) + ")";
  MT_CHECK_CONFIG(dist::uses_parameter_servers(dc), who, ": this process was started as a parameter server "
                  "(MINTRAIN_NUM_SERVERS=", world.servers, ") but dist.algorithm \"", dc.algorithm(), "\" uses none; ",
                  dist::parameter_servers_hint());
  MT_CHECK_CONFIG(dc.backend().empty() || dc.backend() == "gloo", who, ": servers talk over Gloo; dist.backend \"",
                  dc.backend(), "\" cannot reach them (leave it empty: device gradients are staged through host "
                  "memory)");
  // Ctrl-C and SIGTERM (forwarded by launch, or a scheduler's) make the workers finish the
  // iteration and checkpoint, which needs the servers: a server ends when worker 0 says stop or
  // a worker is gone, and a launcher's SIGKILL after its grace period ends a stuck one.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  dist::ProcessGroupOptions po;
  po.backend = "gloo";
  po.transport = dc.transport();
  po.interface = dc.interface();
  po.timeout = std::chrono::seconds(dc.timeout_seconds());
  const dist::Rendezvous r = dist::rendezvous(world, po);
  dist::find_algorithm(dc.algorithm()).serve({r.group, dc, world.workers(), world.servers, &log});
  return 0;
}

}  // namespace mt::apps
