// Algorithms by name, as Caffe's layer registry: each data-parallel algorithm registers itself
// in its own .cpp with MT_REGISTER_ALGORITHM, reading its own message of the config
// (configs/mintrain.proto). Adding one is a file set in dist/, its proto message and its tests;
// the trainer asks make_synchronizer for whatever dist.algorithm names.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"
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

// ---- The dist block of a run config ----
// Each algorithm has its own message (configs/mintrain.proto: dist.ssgd, dist.cdsgd, ...);
// older configs set flat fields (dist.schedule, dist.cdsgd_k, ...), mapped here onto the messages.

// Names in any case, stored in lower case: algorithm, schedules, compressor type, backend and
// transport (flat fields too, where set).
void normalize_dist_names(mintrain::DistConfig& dist);

// The config with every flat field that is set moved onto its message field and cleared. A
// flat field and its message field both set (to different values) is an Error naming both;
// dist.comm_profile, which training no longer reads, is an Error naming dist.ssgd.alpha/beta.
mintrain::DistConfig resolve_dist_config(const mintrain::DistConfig& dist);

// Runs `fn`; an Error from it that names a message field which `written` sets as a flat field
// names the flat field instead, as the config wrote it, and says its new name.
void with_written_names(const mintrain::DistConfig& written, const std::function<void()>& fn);

// Every check of the dist block, in every run (one process too, so a typo fails before the
// launch): the fields common to all algorithms, then each registered algorithm's message.
void validate_dist_config(const mintrain::DistConfig& dist);

// Whether the configured algorithm runs parameter servers beside the workers ("ps", and
// "bytescheduler" or "dlcp" with architecture "ps"), and the partition size the servers must check.
bool uses_parameter_servers(const mintrain::DistConfig& dist);
int64_t server_partition_bytes(const mintrain::DistConfig& dist);
// What a job started with servers but an algorithm that uses none is told to do: the algorithms
// above, and the alternative of starting no servers.
extern const char* const kUseParameterServersHint;

// Checks for the algorithms' validate functions; errors read "<field> must be >= <min> (got v)".
void check_at_least(const std::string& field, double value, double min);
void check_above(const std::string& field, double value, double min);
void check_name(const std::string& field, const std::string& value, const std::vector<std::string>& valid);

}  // namespace mt::dist

// Registers `name` (a bare identifier, e.g. ssgd) at start-up. The symbol mt_algorithm_<name>
// is what dist/CMakeLists.txt asks the linker to keep: a static library drops object files that
// nothing refers to, and an algorithm's file is referred to by its registration only.
#define MT_REGISTER_ALGORITHM(name, validate_fn, make_fn) \
  extern "C" {                                            \
  bool mt_algorithm_##name = ::mt::dist::register_algorithm(#name, {validate_fn, make_fn}); \
  }
