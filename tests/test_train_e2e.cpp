// End to end through the Trainer API: a short run learns (accuracy well above chance), and a run
// interrupted mid-epoch and resumed from its checkpoint ends with bit-identical weights and
// optimizer state to an uninterrupted one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/trainer.h"
#include "core/serialize.h"

using namespace mt::apps;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(MT_SOURCE_DIR) + "/configs/";

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mt_test_e2e_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunConfig synthetic_config(const fs::path& out, const std::vector<std::string>& sets = {}) {
  RunConfig c = load_config(kConfigs + "mlp_synthetic.prototxt");
  c.set_threads(1);  // bit-exact comparisons need the same reduction order
  c.set_output_dir(out.string());
  for (const auto& s : sets) apply_override(c, s);
  validate_config(c);
  return c;
}

TrainerOptions quiet() {
  TrainerOptions o;
  o.quiet = true;
  return o;
}

// Exact equality, element bytes included.
void expect_identical(const mt::core::StateDict& a, const mt::core::StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape());
    const auto x = a[i].second.contiguous(), y = b[i].second.contiguous();
    ASSERT_EQ(x.nbytes(), y.nbytes());
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "values differ";
  }
}

}  // namespace

TEST(TrainE2E, SyntheticMlpLearns) {
  const fs::path out = temp_dir("learns");
  Trainer t(synthetic_config(out), quiet());
  const TrainResult r = t.train();
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.iterations, 3 * t.iterations_per_epoch());
  EXPECT_GT(r.last_eval.accuracy, 50.0) << "10 classes: chance is 10%";
  EXPECT_GE(r.best_accuracy, r.last_eval.accuracy);

  // Output: one train record per progress line and one eval record per epoch, as JSON lines.
  std::ifstream metrics(out / "metrics.jsonl");
  std::string line;
  int train_lines = 0, eval_lines = 0;
  while (std::getline(metrics, line)) {
    ASSERT_TRUE(line.front() == '{' && line.back() == '}') << line;
    for (const char* key : {"\"type\"", "\"epoch\"", "\"iter\"", "\"loss\"", "\"acc\"", "\"lr\"",
                            "\"img_s\"", "\"time\""}) {
      EXPECT_NE(line.find(key), std::string::npos) << key << " missing in " << line;
    }
    train_lines += line.find("\"type\":\"train\"") != std::string::npos;
    eval_lines += line.find("\"type\":\"eval\"") != std::string::npos;
  }
  EXPECT_EQ(train_lines, 3 * 2);  // print_every_iters 16, 32 iterations per epoch
  EXPECT_EQ(eval_lines, 3);
  // Rotation keeps the newest two (keep_last: 2), plus best.ckpt.
  const auto ckpts = CheckpointDir::list((out / "checkpoints").string());
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(fs::path(ckpts.back()).filename(), CheckpointDir::file_name(r.iterations));
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "best.ckpt"));
  EXPECT_EQ(resolve_checkpoint(out.string()), ckpts.back());

  // The checkpoint carries the config, so it can be rebuilt, and the weights, which evaluate
  // to the same accuracy.
  const TrainingState s = load_checkpoint(ckpts.back(), nullptr, nullptr, nullptr);
  EXPECT_EQ(s.epoch, 3);
  EXPECT_EQ(s.next_batch, 0);
  RunConfig stored = parse_config(s.config_text, "checkpoint");
  TrainerOptions eval_opt = quiet();
  eval_opt.eval_only = true;
  Trainer e(stored, eval_opt);
  e.load_weights(ckpts.back());
  EXPECT_DOUBLE_EQ(e.evaluate().accuracy, r.last_eval.accuracy);
  fs::remove_all(out);
}

// Uninterrupted vs. stopped at `stop_at` and resumed in a fresh Trainer: identical at the end.
void check_resume_is_exact(const std::vector<std::string>& sets, int64_t stop_at) {
  const fs::path a_dir = temp_dir("a"), b_dir = temp_dir("b"), c_dir = temp_dir("c");
  Trainer a(synthetic_config(a_dir, sets), quiet());
  const TrainResult ra = a.train();

  TrainerOptions stop = quiet();
  stop.stop_at_iteration = stop_at;
  Trainer b(synthetic_config(b_dir, sets), stop);
  const TrainResult rb = b.train();
  ASSERT_TRUE(rb.interrupted);
  ASSERT_FALSE(rb.last_checkpoint.empty());
  EXPECT_EQ(rb.iterations, stop_at);

  Trainer c(synthetic_config(c_dir, sets), quiet());
  c.resume(b_dir.string());
  EXPECT_EQ(c.state().global_iteration, stop_at);
  const TrainResult rc = c.train();
  EXPECT_FALSE(rc.interrupted);
  EXPECT_EQ(rc.iterations, ra.iterations);
  expect_identical(a.model().state_dict(), c.model().state_dict());
  expect_identical(a.optimizer().state_dict(), c.optimizer().state_dict());
  EXPECT_DOUBLE_EQ(rc.last_eval.accuracy, ra.last_eval.accuracy);
  EXPECT_DOUBLE_EQ(rc.last_eval.loss, ra.last_eval.loss);
  for (const auto& d : {a_dir, b_dir, c_dir}) fs::remove_all(d);
}

TEST(TrainE2E, ResumeMidEpochIsBitIdentical) {
  // 32 iterations per epoch: stop in the middle of the second epoch. Cosine schedule and
  // weight decay so that the learning rate and momentum state both matter.
  check_resume_is_exact({"epochs=3", "lr_schedule.type=cosine", "optimizer.weight_decay=1e-4"}, 45);
}

TEST(TrainE2E, ResumeAtEpochBoundaryIsBitIdentical) {
  check_resume_is_exact({"epochs=2"}, 32);
}

TEST(TrainE2E, ResumeWithBatchNormAndAugmentation) {
  // ResNet-20 has batch-norm buffers; random crop + flip draw from the loader's generators.
  check_resume_is_exact({"model.name=resnet20", "data.synthetic.shape=[3,8,8]", "data.synthetic.size=192",
                         "data.train_transform.random_crop_padding=2",
                         "data.train_transform.random_flip=true", "optimizer.lr=0.02", "epochs=2",
                         "data.batch_size=32"},
                        8);
}

TEST(TrainE2E, FashionMnistSliceLearns) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data)) GTEST_SKIP() << data << " not installed (apt-get install dataset-fashion-mnist)";
  const fs::path out = temp_dir("fmnist");
  RunConfig c = load_config(kConfigs + "lenet_fashion_mnist.prototxt");
  c.set_output_dir(out.string());
  // One thread: with all cores, OpenMP spin-waits crawl when ctest runs suites in parallel.
  for (const std::string s : {"threads=1", "epochs=1", "model.name=mlp", "model.hidden=[128]",
                              "data.limit_train_batches=150", "data.limit_eval_batches=4",
                              "lr_schedule.warmup_epochs=0", "checkpoint.dir=\"\""}) {
    apply_override(c, s);
  }
  Trainer t(c, quiet());
  const TrainResult r = t.train();
  EXPECT_GT(r.last_eval.accuracy, 65.0);
  EXPECT_EQ(r.last_eval.examples, 4 * 500);
  EXPECT_TRUE(r.last_checkpoint.empty());  // checkpoints off
  EXPECT_FALSE(fs::exists(out / "checkpoints"));
  fs::remove_all(out);
}
