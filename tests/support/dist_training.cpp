#include "support/dist_training.h"

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/random.h"
#include "layers/models/registry.h"

namespace mt::testing {

std::shared_ptr<layers::Module> tiny_mlp(uint64_t seed, int64_t image, int64_t classes) {
  core::Generator gen(seed);
  layers::ModelOptions o;
  o.in_channels = 1;
  o.image_size = image;
  o.num_classes = classes;
  o.hidden = {16, 12};
  return layers::build_model("mlp", o, gen);
}

double train_synthetic_mlp(std::shared_ptr<dist::ProcessGroup> group, int rank,
                           const std::string& output_dir, const std::vector<std::string>& overrides,
                           std::ostream& log) {
  apps::RunConfig c = apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  c.set_threads(1);
  c.set_output_dir(output_dir);
  apps::apply_override(c, "data.batch_size=8");
  for (const auto& o : overrides) apps::apply_override(c, o);
  apps::validate_config(c);
  apps::TrainerOptions opt;
  opt.group = std::move(group);
  opt.log = &log;
  opt.quiet = rank != 0;
  apps::Trainer t(c, opt);
  return t.train().last_eval.accuracy;
}

}  // namespace mt::testing
