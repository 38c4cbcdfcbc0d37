// A run's folder is never mixed or lost (apps/run_folder.h, apps/checkpoint.h), and what the
// trainer does around it: a second run into a used folder is refused or moves the first aside,
// a lock keeps two runs apart, rotation never deletes the newest checkpoint, resuming an older
// checkpoint sets the newer ones aside, a checkpoint of another job shape continues at the same
// sample count; also max_steps, eval.every_iters, the metrics records and --weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>
#include <fstream>
#include <sstream>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/run_folder.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/runtime.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

using namespace mt::apps;
namespace fs = std::filesystem;
namespace core = mt::core;
namespace dist = mt::dist;
namespace th = mt::testing;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mt_test_run_folder_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunConfig tiny(const fs::path& out, const std::vector<std::string>& sets = {}) {
  RunConfig c = load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  c.set_threads(1);
  c.set_output_dir(out.string());
  for (const auto& s : sets) apply_override(c, s);
  validate_config(c);
  return c;
}

TrainResult train(const RunConfig& c, TrainerOptions o = {}, const std::string& resume = "",
                  std::ostringstream* log = nullptr) {
  std::ostringstream sink;
  o.log = log != nullptr ? log : &sink;
  Trainer t(c, o);
  if (!resume.empty()) t.resume(resume);
  return t.train();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunFolderPaths paths_of(const fs::path& out) {
  return {out.string(), (out / "checkpoints").string(), (out / "metrics.jsonl").string()};
}

}  // namespace

TEST(RunFolder, ASecondRunIntoAUsedFolderIsRefusedAndChangesNothing) {
  const fs::path out = temp_dir("second");
  train(tiny(out, {"epochs=2"}));
  const std::string metrics = slurp(out / "metrics.jsonl");
  const auto checkpoints = CheckpointDir::list((out / "checkpoints").string());
  const auto best_size = fs::file_size(out / "checkpoints" / "best.ckpt");
  ASSERT_FALSE(metrics.empty());
  ASSERT_FALSE(checkpoints.empty());
  try {
    train(tiny(out, {"epochs=1", "optimizer.lr=0.001"}));
    FAIL() << "a fresh run into a folder holding a run must be refused";
  } catch (const core::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(th::contains(msg, out.string())) << msg;
    EXPECT_TRUE(th::contains(msg, "--resume auto")) << msg;
    EXPECT_TRUE(th::contains(msg, "--overwrite")) << msg;
    EXPECT_TRUE(th::contains(msg, "--output")) << msg;
  }
  EXPECT_EQ(slurp(out / "metrics.jsonl"), metrics);
  EXPECT_EQ(CheckpointDir::list((out / "checkpoints").string()), checkpoints);
  EXPECT_EQ(fs::file_size(out / "checkpoints" / "best.ckpt"), best_size);
}

TEST(RunFolder, OverwriteMovesThePreviousRunAsideWhole) {
  const fs::path out = temp_dir("overwrite");
  train(tiny(out, {"epochs=2"}));
  const std::string metrics = slurp(out / "metrics.jsonl");
  TrainerOptions o;
  o.overwrite = true;
  std::ostringstream log;
  train(tiny(out, {"epochs=1"}), o, "", &log);
  // The new run is alone in the folder; the old one is complete beside it.
  EXPECT_EQ(CheckpointDir::list((out / "checkpoints").string()).size(), 1u);
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(out.parent_path())) {
    if (e.path().filename().string().rfind(out.filename().string() + ".old-", 0) == 0) aside.push_back(e.path());
  }
  ASSERT_EQ(aside.size(), 1u) << log.str();
  EXPECT_EQ(slurp(aside[0] / "metrics.jsonl"), metrics);
  EXPECT_EQ(CheckpointDir::list((aside[0] / "checkpoints").string()).size(), 2u);
  EXPECT_TRUE(fs::exists(aside[0] / "checkpoints" / "best.ckpt"));
  EXPECT_TRUE(th::contains(log.str(), aside[0].string())) << log.str();
  fs::remove_all(aside[0]);
}

TEST(RunFolder, AFolderWithOnlyAConfigIsFree) {
  const fs::path out = temp_dir("only_config");
  std::ofstream(out / "config.prototxt") << "name: \"x\"\n";
  EXPECT_TRUE(RunFolder::previous_run(paths_of(out)).empty());
  EXPECT_NO_THROW(RunFolder(paths_of(out), RunFolderMode::Fresh, nullptr));
}

TEST(RunFolder, TheLockKeepsASecondClaimOutAndNamesTheOwner) {
  const fs::path out = temp_dir("lock");
  RunFolder first(paths_of(out), RunFolderMode::Fresh, nullptr);
  try {
    RunFolder second(paths_of(out), RunFolderMode::Continue, nullptr);
    FAIL() << "two claims on one folder";
  } catch (const core::ConfigError&) {
    FAIL() << "a folder in use is not a permanent error: the other run may end";
  } catch (const core::Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(th::contains(msg, "in use by another run")) << msg;
    EXPECT_TRUE(th::contains(msg, "pid " + std::to_string(::getpid()))) << msg;
  }
}

TEST(RunFolder, ALockLeftByADeadRunIsTakenOver) {
  const fs::path out = temp_dir("stale");
  std::ofstream(out / RunFolder::kLockName) << "pid 999999 on host elsewhere, since 2026-01-01 00:00:00\n";
  std::ostringstream log;
  {
    RunFolder claim(paths_of(out), RunFolderMode::Fresh, &log);
    EXPECT_TRUE(th::contains(slurp(out / RunFolder::kLockName), "pid " + std::to_string(::getpid())));
  }
  EXPECT_TRUE(th::contains(log.str(), "pid 999999 on host elsewhere")) << log.str();
  EXPECT_TRUE(slurp(out / RunFolder::kLockName).empty()) << "released on exit";
}

TEST(RunFolder, ATrainingRunHoldsTheLockUntilItEnds) {
  const fs::path out = temp_dir("train_lock");
  RunFolder other(paths_of(out), RunFolderMode::Continue, nullptr);
  try {
    train(tiny(out));
    FAIL() << "a run started while another holds the folder";
  } catch (const core::Error& e) {
    EXPECT_TRUE(th::contains(e.what(), "in use by another run")) << e.what();
  }
  EXPECT_FALSE(fs::exists(out / "metrics.jsonl"));
}

TEST(RunFolder, StaleTemporaryCheckpointFilesAreRemovedAtStart) {
  const fs::path out = temp_dir("tmp_files");
  fs::create_directories(out / "checkpoints");
  std::ofstream(out / "checkpoints" / "iter-000000005.ckpt.tmp.4242") << "half a file";
  std::ofstream(out / "checkpoints" / "notes.txt") << "mine";
  RunFolder claim(paths_of(out), RunFolderMode::Fresh, nullptr);
  EXPECT_FALSE(fs::exists(out / "checkpoints" / "iter-000000005.ckpt.tmp.4242"));
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "notes.txt"));
}

TEST(CheckpointRotation, TheCheckpointJustWrittenIsNeverDeleted) {
  const fs::path out = temp_dir("rotation");
  // A run's checkpoints, then a newer-numbered file of another origin in the same folder.
  train(tiny(out, {"epochs=1", "checkpoint.keep_last=1"}));
  const auto ours = CheckpointDir::list((out / "checkpoints").string());
  ASSERT_EQ(ours.size(), 1u);
  fs::copy_file(ours[0], out / "checkpoints" / CheckpointDir::file_name(999999));
  // Saving iteration 32 again with keep_last 1: the higher-numbered file must not win.
  CheckpointDir dir((out / "checkpoints").string(), 1);
  RunConfig c = tiny(out);
  Trainer t(c, TrainerOptions{});
  TrainingState s;
  s.global_iteration = 40;
  s.config_text = "";
  const std::string written = dir.save(t.model(), t.optimizer(), *std::make_unique<dist::LocalSynchronizer>(), s);
  EXPECT_TRUE(fs::exists(written));
}

TEST(CheckpointRotation, ResumingAnOlderCheckpointSetsTheNewerOnesAside) {
  const fs::path out = temp_dir("older");
  train(tiny(out, {"epochs=3", "checkpoint.keep_last=0"}));
  const auto files = CheckpointDir::list((out / "checkpoints").string());
  ASSERT_EQ(files.size(), 3u);  // iterations 32, 64, 96
  std::ostringstream log;
  TrainerOptions o;
  train(tiny(out, {"epochs=2", "checkpoint.keep_last=0"}), o, files[0], &log);
  // The run went on from iteration 32 to 64; the abandoned 96 is kept, out of the way, and
  // --resume auto now finds this run's newest.
  const auto now = CheckpointDir::list((out / "checkpoints").string());
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now.back(), files[1]);
  EXPECT_EQ(load_checkpoint(now.back(), nullptr, nullptr, nullptr).global_iteration, 64);
  EXPECT_TRUE(th::contains(log.str(), "superseded-")) << log.str();
  bool found = false;
  for (const auto& e : fs::directory_iterator(out / "checkpoints")) {
    if (e.is_directory() && fs::exists(e.path() / fs::path(files[2]).filename())) found = true;
  }
  EXPECT_TRUE(found) << "iteration 96 set aside, not deleted";
}

TEST(JobShape, ResumingWithAnotherGlobalBatchContinuesAtTheSameSampleCount) {
  const fs::path out = temp_dir("shape");
  // Batch 16: 64 iterations an epoch over the 1024 synthetic examples; stop after 40.
  RunConfig small = tiny(out, {"data.batch_size=16", "epochs=2"});
  TrainerOptions stop;
  stop.stop_at_iteration = 40;
  ASSERT_TRUE(train(small, stop).interrupted);
  const std::string ckpt = CheckpointDir::list((out / "checkpoints").string()).back();
  const TrainingState saved = load_checkpoint(ckpt, nullptr, nullptr, nullptr);
  EXPECT_EQ(saved.global_batch(), 16);
  EXPECT_EQ(saved.global_iteration, 40);

  // Batch 32 sees twice the samples an iteration: 640 samples = iteration 20, batch 20 of 32.
  std::ostringstream log;
  TrainerOptions o;
  o.log = &log;
  Trainer t(tiny(out, {"data.batch_size=32", "epochs=2"}), o);
  t.resume(ckpt);
  EXPECT_EQ(t.state().global_iteration, 20);
  EXPECT_EQ(t.state().next_batch, 20);
  EXPECT_TRUE(th::contains(log.str(), "global batch 16 (1 ranks x 16 x 1 micro-batches)")) << log.str();
  EXPECT_TRUE(th::contains(log.str(), "iteration 40 -> 20")) << log.str();
  const TrainResult r = t.train();
  EXPECT_EQ(r.iterations, 64);  // 2 epochs of 32 iterations: the schedule's end is unchanged
}

// The case: a 2-rank checkpoint resumed by one process of the same per-rank batch
// continues the schedule at the same sample count; CD-SGD, whose state is per rank, refuses.
TEST(JobShape, TwoRanksResumedOnOneProcessContinueTheSchedule) {
  const fs::path out = temp_dir("two_to_one");
  // Two ranks of batch 16 (global 32): 32 iterations an epoch; stop after 10.
  ASSERT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
                RunConfig c = tiny(out, {"data.batch_size=16", "epochs=2"});
                TrainerOptions o;
                o.group = ctx.group;
                o.quiet = true;
                o.stop_at_iteration = 10;
                Trainer t(c, o);
                EXPECT_TRUE(t.train().interrupted);
              }).ok_or_report());
  const std::string ckpt = CheckpointDir::list((out / "checkpoints").string()).back();
  const TrainingState saved = load_checkpoint(ckpt, nullptr, nullptr, nullptr);
  ASSERT_EQ(saved.world_size, 2);
  ASSERT_EQ(saved.global_iteration, 10);

  // One process of batch 16: 64 iterations an epoch, and 320 samples seen = iteration 20.
  std::ostringstream log;
  TrainerOptions o;
  o.log = &log;
  Trainer t(tiny(out, {"data.batch_size=16", "epochs=2"}), o);
  t.resume(ckpt);
  EXPECT_EQ(t.state().global_iteration, 20);
  EXPECT_EQ(t.state().next_batch, 20);
  EXPECT_TRUE(th::contains(log.str(), "global batch 32 (2 ranks x 16")) << log.str();
  // The learning rate at the resumed point is the schedule's at the same fraction of the run.
  EXPECT_EQ(t.train().iterations, 128);

}

TEST(JobShape, PerRankStateRefusesAnotherWorldSizeNamingBoth) {
  const fs::path out = temp_dir("per_rank");
  const std::vector<std::string> cdsgd = {"data.batch_size=16", "epochs=2", "dist.algorithm=cdsgd",
                                          "dist.compressor.type=two_bit", "dist.cdsgd.warmup_iters=2"};
  ASSERT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
                TrainerOptions o;
                o.group = ctx.group;
                o.quiet = true;
                o.stop_at_iteration = 6;
                Trainer t(tiny(out, cdsgd), o);
                t.train();
              }).ok_or_report());
  const std::string ckpt = CheckpointDir::list((out / "checkpoints").string()).back();
  // CD-SGD's residuals and velocities belong to the two ranks that wrote them: four refuse.
  EXPECT_TRUE(mt::testing::run_ranks(4, [&](mt::testing::RankContext& ctx) {
                TrainerOptions o;
                o.group = ctx.group;
                o.quiet = true;
                Trainer t(tiny(out, cdsgd), o);
                const std::string msg = th::error_of([&] { t.resume(ckpt); });
                EXPECT_TRUE(th::contains(msg, "written by 2 ranks, and this job has 4")) << msg;
                EXPECT_TRUE(th::contains(msg, "--nproc-per-node 2")) << msg;
                EXPECT_THROW(t.resume(ckpt), core::ConfigError) << "a restart cannot fix it: exit 3";
              }).ok_or_report());
}

// A resume on another global batch: what the earlier job wrote after the resumed checkpoint,
// and what its count numbers past this job's start, is set aside (named, not deleted); the
// metrics log keeps the records up to the resume point, in this job's count, so its
// iterations never go back.
TEST(JobShape, ResumingOnAnotherGlobalBatchSetsAsideWhatFollowsAndRecountsTheMetrics) {
  const fs::path out = temp_dir("recount");
  // Batch 16: 64 iterations an epoch; a checkpoint and a record every 8; stopped at 40.
  const std::vector<std::string> every8 = {"epochs=2", "checkpoint.every_iters=8", "checkpoint.keep_last=0",
                                           "logging.print_every_iters=8"};
  std::vector<std::string> small = every8;
  small.push_back("data.batch_size=16");
  TrainerOptions stop;
  stop.stop_at_iteration = 40;
  ASSERT_TRUE(train(tiny(out, small), stop).interrupted);
  const std::string ckpt = (out / "checkpoints" / CheckpointDir::file_name(24)).string();
  ASSERT_TRUE(fs::exists(ckpt));

  // Batch 32 from iteration 24 of batch 16: iteration 12 here.
  std::vector<std::string> large = every8;
  large.push_back("data.batch_size=32");
  std::ostringstream log;
  stop.stop_at_iteration = 20;
  ASSERT_TRUE(train(tiny(out, large), stop, ckpt, &log).interrupted);
  const std::string notes = log.str();
  EXPECT_TRUE(th::contains(notes, "the checkpoints numbered past iteration 12 (iter-000000016.ckpt, "
                                  "iter-000000024.ckpt, iter-000000032.ckpt, iter-000000040.ckpt) were moved to "))
      << notes;
  EXPECT_TRUE(th::contains(notes, "records after iteration 24 dropped")) << notes;
  // This job's checkpoints: the start in its count, then its own; the older one of batch 16 sorts before.
  std::vector<int64_t> kept;
  for (const auto& f : CheckpointDir::list((out / "checkpoints").string())) {
    kept.push_back(CheckpointDir::iteration_in_name(f));
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{8, 12, 16, 20}));
  EXPECT_EQ(load_checkpoint((out / "checkpoints" / CheckpointDir::file_name(12)).string(), nullptr, nullptr, nullptr)
                .global_batch(),
            32);
  // The metrics' iterations go up, and the records of batch 16 up to 24 count 4, 8, 12 here.
  std::ifstream metrics(out / "metrics.jsonl");
  std::vector<int64_t> iters;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"type\":\"train\"") == std::string::npos) continue;
    const auto at = line.find("\"iter\":") + 7;
    iters.push_back(std::stoll(line.substr(at)));
  }
  EXPECT_EQ(iters, (std::vector<int64_t>{4, 8, 12, 16})) << slurp(out / "metrics.jsonl");
  bool kept_whole = false;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().filename().string().rfind("metrics.jsonl.superseded-", 0) == 0) {
      kept_whole = th::contains(slurp(e.path()), "\"iter\":40,");
    }
  }
  EXPECT_TRUE(kept_whole) << "the previous log is kept whole";
}

// The same global batch: the checkpoints and records after the resumed one are set aside, and
// the note names them.
TEST(JobShape, ResumingAnOlderCheckpointDropsTheRecordsAfterIt) {
  const fs::path out = temp_dir("rewind");
  const std::vector<std::string> every8 = {"epochs=2", "checkpoint.every_iters=8", "checkpoint.keep_last=0",
                                           "logging.print_every_iters=8"};
  TrainerOptions stop;
  stop.stop_at_iteration = 24;
  ASSERT_TRUE(train(tiny(out, every8), stop).interrupted);
  std::ostringstream log;
  stop.stop_at_iteration = 20;
  train(tiny(out, every8), stop, (out / "checkpoints" / CheckpointDir::file_name(8)).string(), &log);
  EXPECT_TRUE(th::contains(log.str(), "the checkpoints newer than iter-000000008.ckpt (iter-000000016.ckpt, "
                                      "iter-000000024.ckpt) were moved to ")) << log.str();
  EXPECT_TRUE(th::contains(log.str(), "2 records after iteration 8 dropped")) << log.str();
  const std::string metrics = slurp(out / "metrics.jsonl");
  EXPECT_EQ(metrics.find("\"iter\":24,"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("\"iter\":16,"), metrics.rfind("\"iter\":16,")) << "one record of iteration 16\n" << metrics;
}

TEST(JobShape, TheConfigNoteNamesEachDifferingFieldAndIgnoresTheOutputFolder) {
  EXPECT_EQ(config_differences("epochs: 2\noutput_dir: \"a\"\n", "epochs: 2\noutput_dir: \"b\"\n"), "");
  const std::string diff = config_differences("epochs: 2\noptimizer { lr: 0.1 }\n", "epochs: 3\noptimizer { lr: 0.02 }\n");
  EXPECT_TRUE(th::contains(diff, "epochs: 2 -> 3")) << diff;
  EXPECT_TRUE(th::contains(diff, "optimizer.lr: 0.1 -> 0.02")) << diff;
}

TEST(TrainerLimits, MaxStepsEndsTheRunMidEpochWithAnEvaluationAndACheckpoint) {
  const fs::path out = temp_dir("max_steps");
  std::ostringstream log;
  const TrainResult r = train(tiny(out, {"epochs=100", "max_steps=45", "lr_schedule.type=linear"}), {}, "", &log);
  EXPECT_EQ(r.iterations, 45);
  EXPECT_GT(r.last_eval.examples, 0);
  const auto files = CheckpointDir::list((out / "checkpoints").string());
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(load_checkpoint(files.back(), nullptr, nullptr, nullptr).global_iteration, 45);
  EXPECT_TRUE(th::contains(log.str(), "45 steps (max_steps)")) << log.str();
  // The linear schedule reaches its end (lr 0) at the last step, not after 100 epochs.
  const std::string metrics = slurp(out / "metrics.jsonl");
  EXPECT_TRUE(th::contains(metrics, "\"iter\":45,\"epoch_iter\":13")) << metrics;
}

TEST(TrainerLimits, EvalEveryItersAndMetricsEveryItersAreTheirOwnCadence) {
  const fs::path out = temp_dir("cadence");
  // 32 iterations, console every 100 (so only at the epoch's end), metrics every 4, eval every 10.
  train(tiny(out, {"epochs=1", "logging.print_every_iters=100", "logging.metrics_every_iters=4",
                   "eval.every_iters=10"}));
  std::ifstream in(out / "metrics.jsonl");
  int train_records = 0, eval_records = 0;
  for (std::string line; std::getline(in, line);) {
    if (th::contains(line, "\"type\":\"train\"")) {
      ++train_records;
      EXPECT_TRUE(th::contains(line, "\"grad_norm\":")) << line;
      EXPECT_TRUE(th::contains(line, "\"wall_time\":")) << line;
    }
    if (th::contains(line, "\"type\":\"eval\"")) ++eval_records;
  }
  EXPECT_EQ(train_records, 8);  // 4, 8, ..., 32
  EXPECT_EQ(eval_records, 4);   // 10, 20, 30, and the epoch's end
}

TEST(TrainerLimits, TimeGoesOnAfterAResume) {
  const fs::path out = temp_dir("time");
  TrainerOptions stop;
  stop.stop_at_iteration = 16;
  train(tiny(out, {"epochs=1", "logging.print_every_iters=8"}), stop);
  const std::string ckpt = CheckpointDir::list((out / "checkpoints").string()).back();
  const TrainingState s = load_checkpoint(ckpt, nullptr, nullptr, nullptr);
  EXPECT_GT(s.elapsed_seconds, 0.0);
  Trainer t(tiny(out, {"epochs=1", "logging.print_every_iters=8"}), TrainerOptions{});
  t.resume(ckpt);
  const TrainResult r = t.train();
  EXPECT_EQ(r.iterations, 32);
  const TrainingState end = load_checkpoint(CheckpointDir::list((out / "checkpoints").string()).back(),
                                            nullptr, nullptr, nullptr);
  EXPECT_GT(end.elapsed_seconds, s.elapsed_seconds);
}

TEST(FineTuning, WeightsCopyWhatMatchesAndSayWhatDidNot) {
  const fs::path a = temp_dir("weights_a"), b = temp_dir("weights_b");
  train(tiny(a, {"epochs=1"}));
  const std::string ckpt = (a / "checkpoints" / "best.ckpt").string();
  // Same body, another number of classes: the classifier keeps its fresh initialization.
  std::ostringstream log;
  TrainerOptions o;
  o.log = &log;
  Trainer t(tiny(b, {"model.num_classes=5", "data.synthetic.classes=5"}), o);
  t.init_from_weights(ckpt);
  EXPECT_TRUE(th::contains(log.str(), "--weights: copied ")) << log.str();
  EXPECT_TRUE(th::contains(log.str(), "kept the initial values of")) << log.str();
  EXPECT_EQ(t.state().global_iteration, 0);  // a fresh run: nothing but weights carried over
  // A model with nothing in common is refused.
  Trainer other(tiny(b, {"model.name=lenet5", "data.synthetic.shape=[1,28,28]"}), o);
  EXPECT_THROW(other.init_from_weights(ckpt), core::Error);
}

TEST(ConfigValidation, EveryFloatMustBeFiniteAndDistIsCheckedInOneProcess) {
  RunConfig c = load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  for (const std::string bad : {"optimizer.lr=inf", "optimizer.lr=nan", "model.dropout=nan",
                                "data.train_transform.mean=[inf]", "dist.ssgd.bucket_cap_mb=inf"}) {
    SCOPED_TRACE(bad);
    RunConfig x = c;
    apply_override(x, bad);
    const std::string field = bad.substr(0, bad.find('='));
    EXPECT_TRUE(th::contains(th::error_of([&] { validate_config(x); }), field)) << bad;
  }
  for (const std::string bad : {"dist.algorithm=foo", "dist.ssgd.schedule=bsq", "dist.compressor.type=zip",
                                "dist.timeout_seconds=0", "dist.compressor.topk_ratio=2"}) {
    SCOPED_TRACE(bad);
    RunConfig x = c;
    apply_override(x, bad);
    EXPECT_TRUE(th::contains(th::error_of([&] { validate_config(x); }), bad.substr(0, bad.find('='))));
  }
}

// ibverbs is refused when the config is read, with what to use instead, never mid-run.
TEST(ConfigValidation, TheIbverbsTransportIsRefusedAtOnceWithTheWayOut) {
  RunConfig c = load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  apply_override(c, "dist.transport=ibverbs");
  const std::string msg = th::error_of([&] { validate_config(c); });
  EXPECT_TRUE(th::contains(msg, "unbound buffers")) << msg;
  EXPECT_TRUE(th::contains(msg, "IPoIB")) << msg;
  EXPECT_TRUE(th::contains(msg, "nccl")) << msg;
}

TEST(ConfigValidation, NamesAreMatchedInAnyCase) {
  RunConfig c = load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  apply_override(c, "dist.ssgd.schedule=MGWFBP");
  apply_override(c, "dist.compressor.type=Two_Bit");
  apply_override(c, "optimizer.name=SGD");
  EXPECT_NO_THROW(validate_config(c));
  normalize_names(c);
  EXPECT_EQ(c.dist().ssgd().schedule(), "mgwfbp");
  EXPECT_EQ(c.dist().compressor().type(), "two_bit");
  EXPECT_EQ(c.optimizer().name(), "sgd");
}

TEST(ConfigValidation, AnEmptyConfigFileIsAnErrorNamingTheSections) {
  const fs::path dir = temp_dir("empty");
  std::ofstream(dir / "empty.prototxt") << "# nothing but a comment\n";
  const std::string msg = th::error_of([&] { load_config((dir / "empty.prototxt").string()); });
  EXPECT_TRUE(th::contains(msg, "sets nothing")) << msg;
  EXPECT_TRUE(th::contains(msg, "model")) << msg;
  EXPECT_TRUE(th::contains(msg, "data")) << msg;
}

TEST(Timeline, OneProcessWritesItsTraceToo) {
  const fs::path out = temp_dir("timeline");
  train(tiny(out, {"epochs=1", "dist.timeline_file=trace-{rank}.json"}));
  const std::string trace = slurp(out / "trace-0.json");
  EXPECT_TRUE(th::contains(trace, "\"forward\"")) << "dist.timeline_file was ignored without force_distributed";
  EXPECT_TRUE(th::contains(trace, "\"backward\""));
}

// Other work on the same cores: the progress line is followed by a warning that says so.
TEST(CpuContention, ATrainingRunWhoseThreadsWaitForCoresSaysSo) {
  const fs::path out = temp_dir("contention");
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 3 * mt::core::usable_cores(); ++i) {
    spinners.emplace_back([&] {
      volatile unsigned long x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  std::ostringstream log;
  train(tiny(out, {"epochs=2", "model.hidden=[256,256]", "logging.print_every_iters=32"}), {}, "", &log);
  stop = true;
  for (auto& t : spinners) t.join();
  EXPECT_TRUE(th::contains(log.str(), "warning: this process's threads waited")) << log.str();
  // One thread already: fewer processes on the cores is the advice that helps.
  EXPECT_TRUE(th::contains(log.str(), "run fewer ranks on this machine (`threads` is already 1")) << log.str();
  EXPECT_FALSE(th::contains(log.str(), "lower `threads`")) << log.str();
}
