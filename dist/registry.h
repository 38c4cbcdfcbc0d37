// Algorithms by name, as Caffe's layer registry: each data-parallel algorithm registers itself
// in its own folder with MT_REGISTER_ALGORITHM, with everything the rest of the program asks
// about it (its checks, how to build it, its string options, its parameter servers). Adding one
// is a folder here, its message in configs/mintrain.proto and its tests; apps/ does not change.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"
#include "dist/synchronizer.h"
#include "mintrain.pb.h"

namespace mt::dist {

// What an algorithm is built from.
struct AlgorithmContext {
  std::shared_ptr<ProcessGroup> group;       // the world
  const mintrain::DistConfig& dist;
  const mintrain::OptimizerConfig& optimizer;  // momentum correction takes SGD's momentum over
  SynchronizerOptions common;                // the config text, the timeline, the log
  // The workers and the parameter servers (rendezvous.h: workers first, then the servers);
  // null when the job has no servers. `group` is then the workers' subgroup.
  std::shared_ptr<ProcessGroup> world_with_servers;
  int64_t batch_size = 0;  // data.batch_size: samples per rank per step (0 = unknown)
  // With servers: the partitions' first id on the wire (tags, notes). dist.algorithm "auto" gives
  // each server session ids of its own, as a stopped server leaves its next iteration's push
  // receives posted (Gloo cannot take one back), which would eat a later push.
  int64_t first_partition_id = 0;
};

// An algorithm's options with the context's common part filled in.
template <typename Options>
Options options_from(const AlgorithmContext& c) {
  Options o;
  static_cast<SynchronizerOptions&>(o) = c.common;
  return o;
}

// What a parameter server's process runs (`mintrain train` on a server's rank).
struct ServerContext {
  std::shared_ptr<ProcessGroup> world;  // the workers, then the servers; this process is a server
  const mintrain::DistConfig& dist;
  int workers = 0;
  int servers = 0;
  std::ostream* log = nullptr;
};

// A string option of the dist block, by its path under dist ("ssgd.schedule"), and a value.
struct Option {
  std::string field;
  std::vector<std::string> names;  // the valid values; one value where it names a setting
};

struct Algorithm {
  // Checks the algorithm's own message (every run, whichever algorithm it uses); errors name
  // the field.
  void (*validate)(const mintrain::DistConfig& dist) = nullptr;
  std::unique_ptr<Synchronizer> (*make)(const AlgorithmContext& context) = nullptr;
  // Its string options: written in any case, lower-cased, checked and listed by `mintrain help`.
  std::vector<Option> names;
  // Parameter servers: what a server's process runs (null: the algorithm uses none), and the
  // setting that asks for them (no field: always), e.g. {"dlcp.architecture", {"ps"}}.
  void (*serve)(const ServerContext& context) = nullptr;
  Option servers_if;
  // Other algorithms' messages it reads (auto runs S-SGD and ByteScheduler with their settings).
  std::vector<std::string> reads = {};
};

bool register_algorithm(const std::string& name, Algorithm algorithm);
std::vector<std::string> algorithm_names();  // sorted
// An unknown name is an Error listing the registered ones.
const Algorithm& find_algorithm(const std::string& name);

// The synchronizer `run.dist.algorithm` names, on `group`; null group: one process, the
// LocalSynchronizer. Names are taken as written (the trainer lower-cases them first:
// normalize_dist_names).
std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group,
                                                const mintrain::RunConfig& run,
                                                std::string config_text = "",
                                                std::shared_ptr<Timeline> timeline = nullptr,
                                                std::ostream* log = nullptr,
                                                std::shared_ptr<ProcessGroup> world_with_servers = nullptr);

// ---- The dist block of a run config ----

// Names in any case, stored in lower case: algorithm, backend, transport and every registered
// algorithm's string options.
void normalize_dist_names(mintrain::DistConfig& dist);

// Every check of the dist block, in every run (one process too, so a typo fails before the
// launch): the fields common to all algorithms, then each registered algorithm's message.
void validate_dist_config(const mintrain::DistConfig& dist);

// Whether the configured algorithm runs parameter servers beside the workers, and what a job
// started with servers but an algorithm that uses none is told to do.
bool uses_parameter_servers(const mintrain::DistConfig& dist);
// The algorithms' own messages the config sets although dist.algorithm names another
// ("dist.bytescheduler"): settings that do nothing, which the trainer warns about.
std::vector<std::string> unselected_algorithm_settings(const mintrain::DistConfig& dist);
std::string parameter_servers_hint();

// The dist fields of older configs, which moved into the algorithms' messages: the new name of
// `dist.<field>`, or "" when it never was one.
std::string moved_dist_field(const std::string& field);

// Checks for the algorithms' validate functions; errors read "<field> must be >= <min> (got v)".
void check_at_least(const std::string& field, double value, double min);
void check_above(const std::string& field, double value, double min);
void check_name(const std::string& field, const std::string& value, const std::vector<std::string>& valid);

}  // namespace mt::dist

// Registers `name` (a bare identifier, e.g. ssgd) at start-up with an Algorithm. The symbol
// mt_algorithm_<name> is what dist/CMakeLists.txt asks the linker to keep: a static library
// drops object files that nothing refers to, and an algorithm's file is referred to by its
// registration only.
#define MT_REGISTER_ALGORITHM(name, ...) \
  extern "C" {                           \
  bool mt_algorithm_##name = ::mt::dist::register_algorithm(#name, __VA_ARGS__); \
  }
