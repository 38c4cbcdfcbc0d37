// Algorithms by name, as Caffe's layer registry: each data-parallel algorithm registers itself
// in its own .cpp with MT_REGISTER_ALGORITHM, reading its own message of the config
// (configs/mintrain.proto). Adding one is a file set in dist/, its proto message and its tests;
// the trainer asks make_synchronizer for whatever dist.algorithm names.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "dist/synchronizer.h"
#include "dist/timeline.h"
#include "mintrain.pb.h"

namespace mt::dist {

// What an algorithm is built from.
struct AlgorithmContext {
  std::shared_ptr<ProcessGroup> group;       // the world
  const mintrain::DistConfig& dist;          // flat fields already mapped (dist_config.h)
  const mintrain::OptimizerConfig& optimizer;  // momentum correction takes SGD's momentum over
  std::string config_text;                   // checked equal on every rank at setup
  std::shared_ptr<Timeline> timeline;        // optional
  std::ostream* log = nullptr;               // rank 0's start-up notes
  // The workers and the parameter servers (rendezvous.h: workers first, then the servers);
  // null when the job has no servers. `group` is then the workers' subgroup.
  std::shared_ptr<ProcessGroup> world_with_servers;
  int64_t batch_size = 0;  // data.batch_size: samples per rank per step (0 = unknown)
};

struct Algorithm {
  // Checks the algorithm's own message (every run, whichever algorithm it uses); errors name
  // the field.
  void (*validate)(const mintrain::DistConfig& dist) = nullptr;
  std::unique_ptr<Synchronizer> (*make)(const AlgorithmContext& context) = nullptr;
};

bool register_algorithm(const std::string& name, Algorithm algorithm);
std::vector<std::string> algorithm_names();  // sorted
// An unknown name is an Error listing the registered ones.
const Algorithm& find_algorithm(const std::string& name);

// The synchronizer `run.dist.algorithm` names, on `group`; null group: one process, the
// LocalSynchronizer. Names are taken as written (the trainer lower-cases them first:
// normalize_dist_names). Errors about a field the config set under its older flat name say so.
std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group,
                                                const mintrain::RunConfig& run,
                                                std::string config_text = "",
                                                std::shared_ptr<Timeline> timeline = nullptr,
                                                std::ostream* log = nullptr,
                                                std::shared_ptr<ProcessGroup> world_with_servers = nullptr);

}  // namespace mt::dist

// Registers `name` (a bare identifier, e.g. ssgd) at start-up. The symbol mt_algorithm_<name>
// is what dist/CMakeLists.txt asks the linker to keep: a static library drops object files that
// nothing refers to, and an algorithm's file is referred to by its registration only.
#define MT_REGISTER_ALGORITHM(name, validate_fn, make_fn) \
  extern "C" {                                            \
  bool mt_algorithm_##name = ::mt::dist::register_algorithm(#name, {validate_fn, make_fn}); \
  }
