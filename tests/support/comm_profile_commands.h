// The two commands of the measured-network tests (test_comm_profile, test_dssync_comm_profile),
// run in-process: `mintrain model`'s output, and the error `mintrain profile-comm` stops with.
#pragma once
#include <stdlib.h>

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/model_command.h"
#include "apps/profile_comm_command.h"
#include "support/test_helpers.h"

namespace mt::testing {

// `mintrain model ARGS`'s output; the command must succeed.
inline std::string model_output(const std::vector<std::string>& args) {
  std::ostringstream out;
  EXPECT_EQ(apps::run_model_command(args, out), 0);
  return out.str();
}

// The error of `mintrain profile-comm ARGS` run as a single process: no launcher's variables
// (torchrun's, Slurm's, Open MPI's) are left in the environment, so it is one either way.
inline std::string profile_comm_error(const std::vector<std::string>& args) {
  for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE"})
    ::unsetenv(v);
  return error_of([&] {
    std::ostringstream out;
    apps::run_profile_comm_command(args, out);
  });
}

}  // namespace mt::testing
