#include "dist/registry.h"

#include <map>

#include "core/error.h"
#include "dist/dist_config.h"

namespace mt::dist {
namespace {

std::map<std::string, Algorithm>& registry() {
  static std::map<std::string, Algorithm> algorithms;  // built before main, read after
  return algorithms;
}

}  // namespace

bool register_algorithm(const std::string& name, Algorithm algorithm) {
  MT_CHECK(algorithm.validate && algorithm.make, "internal: algorithm \"", name, "\" registered without functions");
  MT_CHECK(registry().emplace(name, algorithm).second, "internal: algorithm \"", name, "\" registered twice");
  return true;
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& [name, a] : registry()) names.push_back(name);
  return names;
}

const Algorithm& find_algorithm(const std::string& name) {
  const auto it = registry().find(name);
  if (it != registry().end()) return it->second;
  std::string names;
  for (const auto& n : algorithm_names()) names += (names.empty() ? "" : ", ") + n;
  MT_FAIL("unknown dist.algorithm \"", name, "\"; valid names are: ", names);
}

std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group, const mintrain::RunConfig& run,
                                                std::string config_text, std::shared_ptr<Timeline> timeline,
                                                std::ostream* log,
                                                std::shared_ptr<ProcessGroup> world_with_servers) {
  if (!group) return std::make_unique<LocalSynchronizer>();
  std::unique_ptr<Synchronizer> sync;
  with_written_names(run.dist(), [&] {
    const mintrain::DistConfig dist = resolve_dist_config(run.dist());
    const Algorithm& algorithm = find_algorithm(dist.algorithm());
    algorithm.validate(dist);
    sync = algorithm.make({group, dist, run.optimizer(), std::move(config_text), std::move(timeline), log,
                           std::move(world_with_servers), run.data().batch_size()});
  });
  return sync;
}

}  // namespace mt::dist
