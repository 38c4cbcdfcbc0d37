// A `mintrain train` process whose rank is a parameter server's (MINTRAIN_NUM_SERVERS: the last
// ranks of the world, dist/comm/rendezvous.h): it builds no model and reads no data. It checks that
// the config asks for servers, joins the rendezvous with the workers on Gloo, and runs the
// algorithm's server (its `serve`, dist/registry.h) until worker 0 says stop (it ignores SIGINT
// and SIGTERM: the workers' checkpoint after Ctrl-C still needs it). So one command line starts
// workers and servers alike, under `mintrain launch --nservers S`, ssh, Slurm or mpirun.
#pragma once
#include <iosfwd>

#include "dist/comm/rendezvous.h"
#include "mintrain.pb.h"

namespace mt::apps {

// Returns the process's exit status (0: worker 0 said stop); errors are core::Errors naming the
// field, the server and the worker.
int run_parameter_server(const mintrain::RunConfig& config, const dist::WorldInfo& world, std::ostream& log);

}  // namespace mt::apps
