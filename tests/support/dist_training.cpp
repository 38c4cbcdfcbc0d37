#include "support/dist_training.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "layers/models/registry.h"
#include "optim/registry.h"

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

std::pair<core::Tensor, core::Tensor> synthetic_batch(int step, int64_t rows, int64_t image, int64_t classes) {
  core::Generator gen(1000 + step);
  core::Tensor x = core::Tensor::empty({rows, 1, image, image});
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = gen.uniform() * 2.0f - 1.0f;
  std::vector<int64_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) y[i] = static_cast<int64_t>((i * 7 + step) % classes);
  return {x, core::Tensor::from_vector(y, {rows})};
}

std::unique_ptr<optim::StepGuard> reference_sgd(const layers::Module& model) {
  optim::OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  return guarded(optim::build_optimizer("sgd", model.parameters(), o));
}

std::unique_ptr<optim::StepGuard> guarded(std::unique_ptr<optim::Optimizer> inner) {
  return std::make_unique<optim::StepGuard>(std::move(inner), /*max_grad_norm=*/0.0);
}

void step(dist::Synchronizer& sync, optim::StepGuard& optimizer, dist::Timeline* timeline) {
  if (sync.end_iteration(optimizer)) return;
  dist::TimelineSpan span(timeline, "optimizer");
  optimizer.step();
}

std::vector<std::vector<float>> weights_of(const layers::Module& model) {
  std::vector<std::vector<float>> w;
  for (const auto& p : model.parameters()) w.push_back(p.to_vector());
  return w;
}

core::Tensor state_entry(const dist::CommHook& hook, const std::string& name) {
  core::StateDict state;
  hook.append_state(state);
  for (const auto& [k, t] : state)
    if (k == name) return t;
  return {};
}

std::shared_ptr<std::vector<size_t>> record_launched_buckets(const dist::SsgdSynchronizer& sync,
                                                             const std::vector<core::Tensor>& params) {
  auto counts = std::make_shared<std::vector<size_t>>();
  for (const core::Tensor& p : params) {
    p.register_grad_ready_hook([&sync, counts](core::Tensor&) {
      size_t launched = 0;
      for (const auto& b : sync.buckets()) launched += b.launched ? 1 : 0;
      counts->push_back(launched);
    });
  }
  return counts;
}

std::string train_until_error(const std::function<std::unique_ptr<dist::Synchronizer>()>& make, int workers,
                              int rank, int64_t rows_per_rank, int64_t image, int64_t classes) {
  try {
    auto model = tiny_mlp(7, image, classes);
    auto opt = reference_sgd(*model);
    auto sync = make();
    sync->setup(*model, *opt);
    for (int s = 0; s < 100000; ++s) {
      sync->begin_iteration(s);
      auto [x, y] = synthetic_batch(s % 8, workers * rows_per_rank, image, classes);
      x = x.narrow(0, rank * rows_per_rank, rows_per_rank).contiguous();
      y = y.narrow(0, rank * rows_per_rank, rows_per_rank).contiguous();
      core::cross_entropy(model->forward(x), y).backward();
      step(*sync, *opt);
      opt->zero_grad();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<double> train_record_values(const std::string& metrics_file, const std::string& field,
                                        const std::string& also) {
  std::ifstream in(metrics_file);
  std::vector<double> values;
  const std::string key = "\"" + field + "\":";
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"train\"") == std::string::npos || line.find("\"" + also + "\":") == std::string::npos)
      continue;
    const size_t at = line.find(key);
    if (at != std::string::npos) values.push_back(std::stod(line.substr(at + key.size())));
  }
  return values;
}

MultiprocessOptions fault_options(int group_timeout_s) {
  MultiprocessOptions o;
  o.group.timeout = std::chrono::seconds(group_timeout_s);
  o.timeout = std::chrono::seconds(40);
  return o;
}

void die_after(std::chrono::milliseconds delay) {
  std::thread([delay] {
    std::this_thread::sleep_for(delay);
    ::kill(::getpid(), SIGKILL);
  }).detach();
}

}  // namespace mt::testing
