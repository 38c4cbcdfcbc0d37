// The `mintrain` command as a user meets it: run the built binary and check exit status and
// stderr. Every mistake must end as "mintrain: error: ..." with a non-zero status, never a
// crash or a hang.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";
const std::string kConfigs = std::string(MT_SOURCE_DIR) + "/configs/";

struct Result {
  int status = -1;  // exit status; -1 if killed by a signal
  std::string out, err;
};

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("mt_test_cli_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `mintrain ARGS` (args are shell words; the tests control them) with a time limit.
Result run(const std::string& args) {
  const fs::path out = temp_dir() / "stdout", err = temp_dir() / "stderr";
  const std::string cmd = "cd " + temp_dir().string() + " && timeout 120 " + kBinary + " " + args +
                          " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int raw = std::system(cmd.c_str());
  Result r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Cli, BinaryExists) { ASSERT_TRUE(fs::exists(kBinary)) << kBinary; }

TEST(Cli, HelpAndVersion) {
  Result r = run("help");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "usage: mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "lenet5")) << r.out;
  r = run("version");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.out, "mintrain ")) << r.out;
}

TEST(Cli, BadCommandLinesAreOneLineThatSaysWhereTheUsageIs) {
  const Result bare = run("");
  EXPECT_EQ(bare.status, 2) << bare.err;
  EXPECT_TRUE(has(bare.err, "usage: mintrain")) << bare.err;
  for (const auto& [args, help] : std::vector<std::pair<std::string, std::string>>{
           {"fly", "`mintrain help`"},
           {"train", "`mintrain train --help`"},
           {"train a.prototxt b.prototxt", "`mintrain train --help`"},
           {"train " + kConfigs + "mlp_synthetic.prototxt --bogus", "`mintrain train --help`"},
           {"train " + kConfigs + "mlp_synthetic.prototxt --resume", "`mintrain train --help`"},
           {"eval " + kConfigs + "mlp_synthetic.prototxt", "`mintrain eval --help`"},
           {"launch --nproc-per-node 2", "`mintrain launch --help`"},
           {"launch --bogus 1 -- help", "`mintrain launch --help`"},
           {"plot", "`mintrain plot --help`"}}) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_TRUE(has(r.err, "mintrain: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, help)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line, not the whole usage:\n" << r.err;
  }
}

TEST(Cli, NonexistentConfig) {
  const Result r = run("train /nonexistent/job.prototxt");
  EXPECT_EQ(r.status, 3);  // a config error: running again unchanged cannot help
  EXPECT_TRUE(has(r.err, "mintrain: error:")) << r.err;
  EXPECT_TRUE(has(r.err, "/nonexistent/job.prototxt")) << r.err;
}

TEST(Cli, BadSyntaxNamesFileLineColumn) {
  const fs::path cfg = temp_dir() / "bad.prototxt";
  std::ofstream(cfg) << "name: \"x\"\nepochs: 2\nmodel {\n  name: mlp\n}\n";  // unquoted string
  const Result r = run("train " + cfg.string());
  EXPECT_EQ(r.status, 3);
  EXPECT_TRUE(has(r.err, "mintrain: error: " + cfg.string() + ":4:")) << r.err;
}

TEST(Cli, UnknownModelListsValidNames) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set model.name=vgg99");
  EXPECT_EQ(r.status, 3);
  EXPECT_TRUE(has(r.err, "vgg99")) << r.err;
  EXPECT_TRUE(has(r.err, "lenet5")) << r.err;
}

TEST(Cli, BadOverridePathListsFields) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set optimizer.learning_rate=1");
  EXPECT_EQ(r.status, 3);
  EXPECT_TRUE(has(r.err, "learning_rate")) << r.err;
  EXPECT_TRUE(has(r.err, "momentum")) << r.err;
}

TEST(Cli, EverySubcommandHasHelp) {
  for (const std::string cmd : {"train", "eval", "launch", "model", "profile-comm", "survey"}) {
    SCOPED_TRACE(cmd);
    for (const std::string flag : {"--help", "-h"}) {
      const Result r = run(cmd + " " + flag);
      EXPECT_EQ(r.status, 0) << r.err;
      EXPECT_TRUE(has(r.out, cmd)) << r.out;
    }
  }
  // launch's own --help, not the worker command's after "--".
  const Result r = run("launch --help -- train x.prototxt");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "--nproc-per-node")) << r.out;
}

// Every field that takes one of a list, with the list, as the validator has it.
TEST(Cli, HelpListsTheValuesOfEveryEnumeratedField) {
  const Result r = run("help");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string field : {"model.name: ", "data.type: ", "optimizer.name: ", "lr_schedule.type: ",
                                  "on_nonfinite: ", "precision: ", "dist.algorithm: ", "dist.ssgd.schedule: ",
                                  "dist.ssgd.allreduce: ", "dist.ps.schedule: ", "dist.bytescheduler.architecture: ",
                                  "dist.dlcp.architecture: ", "dist.dlcp.spray: ", "dist.dlcp.priority_direction: ",
                                  "dist.compressor.type: ", "dist.dssync.schedule: "}) {
    EXPECT_TRUE(has(r.out, "\n  " + field)) << field << "\n" << r.out;
  }
  EXPECT_TRUE(has(r.out, "on_nonfinite: stop, skip")) << r.out;
}

TEST(Cli, HelpListsTheDistributedNamesInOneCase) {
  const Result r = run("help");
  for (const std::string name : {"ssgd", "cdsgd", "dssync", "bsp", "wfbp", "fusion", "mgwfbp", "two_bit", "topk",
                                 "butterfly"}) {
    EXPECT_TRUE(has(r.out, name)) << name << "\n" << r.out;
  }
  EXPECT_FALSE(has(r.out, "MGWFBP")) << r.out;
}

TEST(Cli, ConfigErrorsExitThreeAtOnceInOneProcess) {
  // dist.* is checked before any rendezvous, even when one process ignores it; every number
  // must be finite; an empty file is no config.
  const fs::path empty = temp_dir() / "empty.prototxt";
  std::ofstream(empty) << "\n";
  for (const std::string args : {"train " + kConfigs + "mlp_synthetic.prototxt --set dist.algorithm=foo",
                                 "train " + kConfigs + "mlp_synthetic.prototxt --set optimizer.lr=inf",
                                 "train " + kConfigs + "mlp_synthetic.prototxt --set dist.cdsgd_k=3",
                                 "train " + empty.string(), "eval " + empty.string() + " --checkpoint x"}) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.status, 3) << r.err;
    EXPECT_TRUE(has(r.err, "mintrain: error: ")) << r.err;
  }
  EXPECT_TRUE(has(run("train " + kConfigs + "mlp_synthetic.prototxt --set dist.algorithm=foo").err, "cdsgd"));
  EXPECT_TRUE(has(run("train " + kConfigs + "mlp_synthetic.prototxt --set optimizer.lr=inf").err, "optimizer.lr"));
  // A flat dist field of older configs names the field it moved to.
  EXPECT_TRUE(has(run("train " + kConfigs + "mlp_synthetic.prototxt --set dist.cdsgd_k=3").err, "set dist.cdsgd.k"));
}

// The job's layout of workers and servers is a config error too: exit 3, and launch spends no
// restart on it.
TEST(Cli, ParameterServerLayoutErrorsExitThreeWithoutRestarts) {
  const std::string train = " -- train " + kConfigs + "mlp_synthetic.prototxt --set max_steps=2 --overwrite";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"launch --nproc-per-node 2 --max-restarts 2" + train + " --set dist.algorithm=ps",
       "dist.algorithm \"ps\" needs parameter servers"},
      {"launch --nproc-per-node 2 --max-restarts 2" + train +
           " --set dist.algorithm=bytescheduler --set dist.bytescheduler.architecture=ps",
       "dist.bytescheduler.architecture \"ps\" needs parameter servers"},
      {"launch --nproc-per-node 2 --nservers 1 --max-restarts 2" + train +
           " --set dist.algorithm=ps --set dist.ps.servers=2",
       "dist.ps.servers is 2 but the job started 1"},
      {"launch --nproc-per-node 2 --nservers 1 --max-restarts 2" + train, "but dist.algorithm \"ssgd\" uses none"}};
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.status, 3) << r.err;
    EXPECT_TRUE(has(r.err, message)) << r.err;
    EXPECT_FALSE(has(r.err, "restart 1/")) << r.err;
  }
}

// The survey on the job's own ranks and a parameter server: every candidate of dist.algorithm
// "auto" measured, the parameter server's schedules too, the fastest marked, then the run ends
// and the server with it (launch exits 0 only when every rank did).
TEST(Cli, SurveyMeasuresEveryCandidate) {
  const fs::path out = temp_dir() / "survey";
  const Result r = run("launch --nproc-per-node 2 --nservers 1 -- survey " + kConfigs +
                       "mlp_synthetic.prototxt --iters 2 --output " + out.string());
  EXPECT_EQ(r.status, 0) << r.err;
  for (const std::string name : {"ssgd/bsp", "ssgd/wfbp", "ssgd/fusion", "ssgd/mgwfbp", "bytescheduler/a2a",
                                 "bytescheduler/ps", "ps/bsp", "ps/wfbp", "ps/staggered"})
    EXPECT_TRUE(has(r.out, "] " + std::string(2, ' ') + name)) << name << "\n" << r.out;
  EXPECT_TRUE(has(r.out, "<- chosen")) << r.out;
  EXPECT_FALSE(has(r.out, "           -")) << "a candidate was not measured\n" << r.out;
}

// Settings of an algorithm that dist.algorithm does not select do nothing: the run says so.
TEST(Cli, AnAlgorithmsSettingsItDoesNotRunAreNamed) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set max_steps=1 --overwrite"
                       " --set dist.bytescheduler.partition_bytes=4096");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out + r.err, "warning: dist.bytescheduler is set but dist.algorithm is \"ssgd\"")) << r.out;
  EXPECT_FALSE(has(run("train " + kConfigs + "mlp_synthetic.prototxt --set max_steps=1 --overwrite").out,
                   "is set but dist.algorithm"));
}

// The README's "Using it" order: a run, then another command into the same default folder.
TEST(Cli, ASecondRunIntoTheSameFolderIsRefusedThenOverwriteOrResume) {
  const std::string out = (temp_dir() / "twice").string();
  const std::string cfg = kConfigs + "mlp_synthetic.prototxt";
  ASSERT_EQ(run("train " + cfg + " --set epochs=2 --output " + out).status, 0);
  const std::string metrics = slurp(out + "/metrics.jsonl");
  Result r = run("train " + cfg + " --set epochs=1 --set optimizer.lr=0.02 --output " + out);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_TRUE(has(r.err, "already holds a run")) << r.err;
  EXPECT_EQ(slurp(out + "/metrics.jsonl"), metrics) << "nothing of the first run was touched";

  r = run("train " + cfg + " --set epochs=3 --resume auto --output=" + out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "epoch 3/3 test loss")) << r.out;
  EXPECT_TRUE(has(slurp(out + "/metrics.jsonl"), metrics)) << "appended to, not started over";

  r = run("train " + cfg + " --set epochs=1 --overwrite --output " + out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, ".old-")) << r.out;
  EXPECT_FALSE(has(slurp(out + "/metrics.jsonl"), metrics));
  EXPECT_EQ(run("train " + cfg + " --overwrite=1 --output " + out).status, 2) << "a switch takes no value";
}

// configs/image_folder_tiny.prototxt runs as its comment says: make the folder, then train.
TEST(Cli, TheTinyImageFolderConfigRunsAsItsCommentSays) {
  const std::string make = "cd " + temp_dir().string() + " && bash " + std::string(MT_SOURCE_DIR) +
                           "/apps/scripts/make_image_folder_tiny.sh >/dev/null";
  ASSERT_EQ(std::system(make.c_str()), 0);
  const Result r = run("train " + kConfigs + "image_folder_tiny.prototxt --output " + (temp_dir() / "tiny").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "epoch 3/3 test loss")) << r.out;
}

TEST(Cli, MissingDatasetFolder) {
  const Result r = run("train " + kConfigs + "lenet_fashion_mnist.prototxt --set data.path=/nonexistent");
  EXPECT_EQ(r.status, 3);  // a data error: running again unchanged cannot help
  EXPECT_TRUE(has(r.err, "mintrain: error:")) << r.err;
  EXPECT_TRUE(has(r.err, "/nonexistent")) << r.err;
}

TEST(Cli, MomentumOutsideZeroToOneIsRefused) {
  for (const std::string momentum : {"1", "1.5", "-0.1"}) {
    const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set optimizer.momentum=" + momentum);
    EXPECT_EQ(r.status, 3) << r.err;
    EXPECT_TRUE(has(r.err, "optimizer.momentum must be in [0, 1) (got ")) << r.err;
  }
}

// 32 steps an epoch: a warm-up of one epoch is longer than a run of max_steps 10.
TEST(Cli, AWarmupLongerThanTheRunWarnsOrIsRefusedNamingMaxSteps) {
  const std::string base = "train " + kConfigs + "mlp_synthetic.prototxt --set max_steps=10 --set "
                           "lr_schedule.warmup_epochs=1 --output " + (temp_dir() / "warmup").string();
  Result r = run(base + " --set lr_schedule.type=cosine");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "warning: the learning-rate warm-up (lr_schedule.warmup_epochs 1 = 32 steps) is not "
                         "shorter than the run (max_steps 10): the learning rate peaks at ")) << r.out;
  EXPECT_TRUE(has(r.out, "--set lr_schedule.warmup_epochs=0.0312")) << r.out;
  r = run(base + " --set lr_schedule.type=linear --overwrite");
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_TRUE(has(r.err, "lr_schedule.type \"linear\" decays from the end of the warm-up")) << r.err;
  EXPECT_TRUE(has(r.err, "(max_steps 10)")) << r.err;
  EXPECT_TRUE(has(r.err, "raise max_steps")) << r.err;
}

TEST(Cli, ThreadsAboveTheUsableCoresAreLoweredWithANote) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set threads=1000 --set max_steps=2 --output " +
                       (temp_dir() / "threads").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "threads (threads 1000 lowered to the ")) << r.out;
}

// The schema: "0 = only per-epoch lines".
TEST(Cli, PrintEveryZeroPrintsTheTrainLineOfEachEpoch) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set epochs=2 --set logging.print_every_iters=0 "
                       "--output " + (temp_dir() / "per_epoch").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "epoch 1/2 iter 32/32 ")) << r.out;
  EXPECT_TRUE(has(r.out, "epoch 2/2 iter 32/32 ")) << r.out;
  EXPECT_FALSE(has(r.out, "iter 16/32")) << r.out;
  EXPECT_TRUE(has(slurp(temp_dir() / "per_epoch" / "metrics.jsonl"), "\"type\":\"train\""));
}

TEST(Cli, ADistributedAlgorithmInOneProcessIsNamed) {
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set dist.algorithm=cdsgd --set max_steps=2 "
                       "--output " + (temp_dir() / "one_process").string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "note: dist.algorithm \"cdsgd\" is not used: this is one process")) << r.out;
  EXPECT_TRUE(has(r.out, "mintrain launch --nproc-per-node N")) << r.out;
}

// A run that died before its first checkpoint (a crash in the first epoch) left its metrics:
// --resume auto, as `launch --max-restarts` gives a restarted worker, starts it over.
TEST(Cli, ResumeAutoStartsOverARunThatHasNoCheckpoint) {
  const fs::path out = temp_dir() / "died_early";
  fs::create_directories(out);
  std::ofstream(out / "metrics.jsonl") << "{\"type\":\"train\",\"epoch\":1,\"iter\":16,\"loss\":2.3,\"time\":1}\n";
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set max_steps=4 --resume auto --output " +
                       out.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "no checkpoint to continue from")) << r.out;
  EXPECT_TRUE(has(r.out, "starting it over; its files were moved to " + out.string() + ".old-")) << r.out;
  EXPECT_FALSE(has(r.err + r.out, "with --resume auto")) << "advice to do what was done";
  bool kept = false;
  for (const auto& e : fs::directory_iterator(temp_dir())) {
    if (e.path().filename().string().rfind("died_early.old-", 0) == 0 &&
        has(slurp(e.path() / "metrics.jsonl"), "\"iter\":16")) {
      kept = true;
    }
  }
  EXPECT_TRUE(kept) << "the dead run's records were moved aside, not deleted";
  EXPECT_FALSE(has(slurp(out / "metrics.jsonl"), "\"iter\":16,\"loss\":2.3"));
}

// Another run holds the folder: nothing may claim to have resumed before that refusal.
TEST(Cli, ResumeAutoIntoALockedFolderDoesNotSayItResumed) {
  const fs::path out = temp_dir() / "locked";
  ASSERT_EQ(run("train " + kConfigs + "mlp_synthetic.prototxt --set epochs=1 --output " + out.string()).status, 0);
  const int fd = ::open((out / ".mintrain.lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const Result r = run("train " + kConfigs + "mlp_synthetic.prototxt --set epochs=2 --resume auto --output " +
                       out.string());
  ::close(fd);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "is in use by another run")) << r.err;
  EXPECT_FALSE(has(r.out, "resumed from")) << r.out;
}

// The advice in an error never asks for what was given.
TEST(Cli, TheNonfiniteErrorRecommendsSkipOnlyWhenSkipWasNotGiven) {
  const std::string diverge = "train " + kConfigs + "mlp_synthetic.prototxt --set optimizer.lr=1e30 --set max_steps=40 "
                              "--set checkpoint.dir= --output ";
  Result r = run(diverge + (temp_dir() / "nan_stop").string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "or set on_nonfinite: \"skip\"")) << r.err;
  r = run(diverge + (temp_dir() / "nan_skip").string() + " --set on_nonfinite=skip");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "10 steps in a row were NaN/Inf")) << r.err;
  EXPECT_FALSE(has(r.err, "on_nonfinite")) << r.err;
}

TEST(Cli, TrainEvalAndResumeATinyJob) {
  const std::string out = (temp_dir() / "run").string();
  const std::string cfg = kConfigs + "mlp_synthetic.prototxt";
  Result r = run("train " + cfg + " --set epochs=2 --output " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "epoch 2/2 test loss")) << r.out;
  EXPECT_TRUE(fs::exists(out + "/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(out + "/config.prototxt"));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/best.ckpt"));

  r = run("eval " + cfg + " --checkpoint " + out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "test loss")) << r.out;
  // It names what it evaluated: the file the folder resolved to, its iteration and epoch.
  EXPECT_TRUE(has(r.out, "checkpoint " + out + "/checkpoints/iter-000000064.ckpt: iteration 64, after epoch 2\n"))
      << r.out;

  // One more epoch from the finished run's checkpoint.
  r = run("train " + cfg + " --set epochs=3 --output " + out + " --resume " + out);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "resumed from")) << r.out;
  EXPECT_TRUE(has(r.out, "epoch 3/3 test loss")) << r.out;
  EXPECT_FALSE(has(r.out, "epoch 1/3")) << r.out;

  // A checkpoint of another model is refused with a clear message.
  r = run("eval " + cfg + " --set model.hidden=[16] --checkpoint " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "does not fit")) << r.err;

  // A damaged checkpoint too.
  const std::string best = out + "/checkpoints/best.ckpt";
  fs::resize_file(best, fs::file_size(best) / 2);
  r = run("eval " + cfg + " --checkpoint " + best);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "truncated")) << r.err;
  fs::remove_all(temp_dir());
}
