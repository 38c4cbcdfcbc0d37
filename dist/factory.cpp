#include "dist/factory.h"

#include "core/error.h"
#include "dist/cdsgd_synchronizer.h"
#include "dist/dssync_synchronizer.h"
#include "dist/ssgd_synchronizer.h"

namespace mt::dist {

std::vector<std::string> synchronizer_names() { return {"ssgd", "dssync", "cdsgd"}; }

std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group,
                                                const SyncConfig& config) {
  if (!group) return std::make_unique<LocalSynchronizer>();
  // CD-SGD, and S-SGD with gradient compression (cdsgd_synchronizer.h).
  if (config.algorithm == "cdsgd" || (config.algorithm == "ssgd" && config.compression != "none"))
    return make_compressed_synchronizer(std::move(group), config);
  if (config.algorithm == "ssgd") {
    MT_CHECK((config.alpha < 0) == (config.beta < 0),
             "set both dist.alpha and dist.beta (the network cost T(M) = alpha + beta*M), or neither "
             "to measure them at start-up");
    SsgdOptions o;
    o.schedule = parse_schedule(config.schedule);
    o.bucket_cap_mb = config.bucket_cap_mb;
    o.first_bucket_cap_mb = config.first_bucket_cap_mb;
    o.profile_iters = config.profile_iters;
    o.alpha = config.alpha;
    o.beta = config.beta;
    o.gamma = config.gamma;
    o.cost = config.cost;
    o.cost_source = config.cost_source;
    o.grad_accumulation_steps = config.grad_accumulation_steps;
    o.config_text = config.config_text;
    o.timeline = config.timeline;
    o.log = config.log;
    return std::make_unique<SsgdSynchronizer>(std::move(group), std::move(o));
  }
  if (config.algorithm == "dssync") return make_dssync_synchronizer(std::move(group), config);
  std::string names;
  for (const auto& n : synchronizer_names()) names += (names.empty() ? "\"" : ", \"") + n + "\"";
  MT_FAIL("unknown dist.algorithm \"", config.algorithm, "\"; valid: ", names);
}

}  // namespace mt::dist
