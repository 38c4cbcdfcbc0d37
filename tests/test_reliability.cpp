// Reliability: what happens to a run when something goes wrong around it.
//   - SIGTERM / Ctrl-C: the trainer checkpoints after the iteration and exits 143 / 130; the
//     run continues with --resume auto; the same signal again quits at once.
//   - Damaged checkpoints (flipped bytes, cut short, empty): a clear Error, never a crash, and
//     --resume auto falls back to the newest intact one.
//   - `mintrain launch --max-restarts R`: a worker killed mid-run makes the launcher restart
//     the group, which resumes from the newest checkpoint and finishes; with R = 0 the job fails
//     as before; a SIGTERM to the launcher is forwarded and never restarts.
//   - CUDA out of memory names what was asked and what was free (skips without a GPU).
// The process tests run the real `mintrain` binary on tiny synthetic runs.
#include <gtest/gtest.h>
#include <signal.h>
#include <zlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "apps/checkpoint.h"
#include "core/device.h"
#include "core/error.h"
#include "core/random.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "data/idx_dataset.h"
#include "dist/synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "support/background_process.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";
const std::string kTinyConfig = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("mt_test_reliability_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `mintrain ARGS` started in the background in `dir` (tests/support/background_process.h).
std::vector<std::string> mintrain_argv(std::vector<std::string> args) {
  args.insert(args.begin(), kBinary);
  return args;
}
struct Process : mt::testing::BackgroundProcess {
  Process(const fs::path& dir, std::vector<std::string> args, std::vector<std::string> env = {})
      : BackgroundProcess(dir, mintrain_argv(std::move(args)), std::move(env)) {}
};

struct Result {
  int status = -1;
  std::string out, err;
};

Result run_to_end(const fs::path& dir, const std::vector<std::string>& args, double seconds = 120) {
  Process p(dir, args);
  Result r;
  r.status = p.wait_exit(seconds);
  r.out = p.out();
  r.err = p.err();
  return r;
}

bool any_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !mt::apps::CheckpointDir::list(dir.string()).empty();
}

// The launcher's worker with RANK=rank (read from /proc/<child>/environ), or -1.
pid_t worker_of(pid_t launcher, int rank) {
  const std::string pid = std::to_string(launcher);
  std::ifstream children("/proc/" + pid + "/task/" + pid + "/children");
  const std::string wanted = "RANK=" + std::to_string(rank);
  pid_t child;
  while (children >> child) {
    std::ifstream environ("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
    std::string entry;
    while (std::getline(environ, entry, '\0')) {
      if (entry == wanted) return child;
    }
  }
  return -1;
}

// A tiny model, optimizer and synchronizer for the checkpoint API tests.
struct TinyRun {
  mt::core::Generator gen{3};
  std::shared_ptr<mt::layers::Module> model;
  std::unique_ptr<mt::optim::Optimizer> optimizer;
  mt::dist::LocalSynchronizer sync;
  TinyRun() {
    mt::layers::ModelOptions mo;
    mo.num_classes = 3;
    mo.in_channels = 1;
    mo.image_size = 4;
    mo.hidden = {8};
    model = mt::layers::build_model("mlp", mo, gen);
    mt::optim::OptimizerOptions oo;
    oo.momentum = 0.9;
    optimizer = mt::optim::build_optimizer("sgd", model->parameters(), oo);
  }
  std::vector<float> weights() const {
    std::vector<float> all;
    for (const auto& p : model->parameters()) {
      const auto v = p.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

}  // namespace

TEST(Reliability, SigtermCheckpointsExits143AndResumesAuto) {
  const fs::path dir = temp_dir("sigterm");
  Process p(dir, {"train", kTinyConfig, "--set", "epochs=100000", "--output", "run"});
  // Signal it once training is under way (the first progress line).
  ASSERT_TRUE(p.wait_until([&] { return has(p.out(), "epoch 1/100000 iter"); }, 60)) << p.out() << p.err();
  p.signal(SIGTERM);
  ASSERT_EQ(p.wait_exit(30), 143) << p.err();
  const std::string out = p.out();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped at epoch (\\d+) batch (\\d+) \\(iteration (\\d+)\\); checkpoint (\\S+)")))
      << out;
  const std::string epoch = m[1], iteration = m[3];
  EXPECT_TRUE(fs::exists(dir / m[4].str())) << m[4];
  EXPECT_TRUE(has(p.err(), "to continue, run the same command with --resume auto")) << p.err();

  // The same command with --resume auto (and only the stopped epoch left) picks it up.
  const Result r = run_to_end(dir, {"train", kTinyConfig, "--set", "epochs=" + epoch, "--output", "run",
                                    "--resume", "auto"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "(iteration " + iteration + ")")) << r.out;
  EXPECT_TRUE(has(r.out, "resumed from run/checkpoints/")) << r.out;
  EXPECT_TRUE(has(r.out, "epoch " + epoch + "/" + epoch + " test loss")) << r.out;
  EXPECT_TRUE(has(r.out, "done: " + std::to_string(std::stoll(epoch) * 32) + " iterations")) << r.out;
  fs::remove_all(dir);
}

// Two runs started on one folder: the second stops at once, naming the first; the first's
// metrics stay valid JSON lines.
TEST(Reliability, TwoRunsAtOnceOnOneFolderAreKeptApart) {
  const fs::path dir = temp_dir("two_at_once"), first_dir = dir / "first", second_dir = dir / "second";
  fs::create_directories(first_dir);
  fs::create_directories(second_dir);
  const std::string out = (dir / "run").string();
  Process first(first_dir, {"train", kTinyConfig, "--set", "epochs=100000", "--set", "logging.print_every_iters=8",
                            "--output", out});
  ASSERT_TRUE(first.wait_until([&] { return has(first.out(), "epoch 1/100000 iter"); }, 60)) << first.err();
  Process second(second_dir, {"train", kTinyConfig, "--resume", "auto", "--output", out});
  EXPECT_EQ(second.wait_exit(60), 1) << second.err();
  EXPECT_TRUE(has(second.err(), "in use by another run (pid " + std::to_string(first.pid()))) << second.err();
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait_exit(60), 143) << first.err();
  std::ifstream metrics(out + "/metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(metrics, line); ++records) {
    EXPECT_TRUE(line.size() > 2 && line.front() == '{' && line.back() == '}') << line;
  }
  EXPECT_GT(records, 0);
}

TEST(Reliability, SecondSignalQuitsAtOnceWithoutACheckpoint) {
  const fs::path dir = temp_dir("second_signal");
  // Iterations of several seconds (a wide MLP on big inputs), so the first signal is still
  // waiting for the iteration to end when the second one comes.
  Process p(dir, {"train", kTinyConfig, "--set", "data.synthetic.shape=[3,64,64]", "--set",
                  "data.synthetic.size=512", "--set", "data.batch_size=512", "--set",
                  "model.hidden=[2048,2048]", "--output", "run"});
  ASSERT_TRUE(p.wait_until([&] { return has(p.out(), "output: run"); }, 60)) << p.out() << p.err();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto first = Clock::now();
  p.signal(SIGINT);
  // A repeat within half a second is the same request (a scheduler and the launcher may both
  // deliver one signal): the process must still be running after it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  p.signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_FALSE(p.exited()) << "a repeat within half a second quit the run: " << p.err();
  p.signal(SIGINT);
  const int status = p.wait_exit(30);
  const double seconds = std::chrono::duration<double>(Clock::now() - first).count();
  const std::string err = p.err();
  ASSERT_EQ(status, 130) << err;
  EXPECT_TRUE(has(err, "stopping after this iteration")) << err;
  EXPECT_TRUE(has(err, "quitting at once, without a checkpoint")) << err
      << "\n(the first iteration may have ended within " << seconds << " s on a fast machine)";
  EXPECT_FALSE(has(p.out(), "stopped at epoch")) << p.out();
  EXPECT_FALSE(any_checkpoint(dir / "run" / "checkpoints"));
  fs::remove_all(dir);
}

TEST(Reliability, DamagedCheckpointsAreClearErrorsAndChangeNothing) {
  const fs::path dir = temp_dir("damaged");
  const fs::path good = dir / "good.ckpt";
  {
    TinyRun written;
    mt::apps::TrainingState s;
    s.epoch = 2;
    s.global_iteration = 64;
    s.config_text = "name: \"tiny\"";
    mt::apps::save_checkpoint(good.string(), *written.model, *written.optimizer, written.sync, s);
  }
  const std::string bytes = slurp(good);
  ASSERT_GT(bytes.size(), 200u);

  struct Damage {
    std::string name, bytes, expected;  // expected: a phrase the error must contain
  };
  std::vector<Damage> damages = {
      {"empty", "", "not a mintrain archive"},
      {"magic_only", bytes.substr(0, 8), "truncated"},
      {"half", bytes.substr(0, bytes.size() / 2), "truncated"},
      {"last_byte_missing", bytes.substr(0, bytes.size() - 1), "truncated"},
      {"trailing_garbage", bytes + "xyz", "corrupt"},
      {"text", "name: \"not a checkpoint\"\n", "not a mintrain archive"},
  };
  for (size_t at : {size_t(9), size_t(14), bytes.size() / 3, bytes.size() / 2, bytes.size() - 10, bytes.size() - 2}) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x5A);
    damages.push_back({"flip_at_" + std::to_string(at), flipped, ""});
  }
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    const fs::path path = dir / (d.name + ".ckpt");
    std::ofstream(path, std::ios::binary) << d.bytes;
    TinyRun target;
    const std::vector<float> before = target.weights();
    try {
      (void)mt::apps::load_checkpoint(path.string(), target.model.get(), target.optimizer.get(), &target.sync);
      ADD_FAILURE() << "a damaged checkpoint loaded";
    } catch (const mt::core::Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(has(what, path.string())) << what;  // names the file
      EXPECT_TRUE(has(what, d.expected)) << what;
      EXPECT_TRUE(has(what, "corrupt") || has(what, "truncated") || has(what, "not a mintrain archive") ||
                  has(what, "version"))
          << what;
    }
    EXPECT_EQ(target.weights(), before);  // nothing half-restored
  }
  // The undamaged file still loads (so the failures above are about the damage).
  TinyRun target;
  EXPECT_EQ(mt::apps::load_checkpoint(good.string(), target.model.get(), target.optimizer.get(), &target.sync)
                .global_iteration,
            64);
  fs::remove_all(dir);
}

TEST(Reliability, ResumeAutoSkipsADamagedNewestCheckpointAndFailsClearlyWhenAllAre) {
  const fs::path dir = temp_dir("resume_auto");
  // No checkpoint yet: --resume auto starts from scratch.
  Result r = run_to_end(dir, {"train", kTinyConfig, "--set", "epochs=2", "--output", "run", "--resume", "auto"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "starting from scratch")) << r.out;
  const auto files = mt::apps::CheckpointDir::list((dir / "run" / "checkpoints").string());
  ASSERT_EQ(files.size(), 2u);  // iter-32 and iter-64 (keep_last: 2)

  // The newest one cut short: resume from the one before, with a warning.
  fs::resize_file(files[1], fs::file_size(files[1]) / 2);
  r = run_to_end(dir, {"train", kTinyConfig, "--set", "epochs=3", "--output", "run", "--resume", "auto"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.err, "skipping damaged checkpoint")) << r.err;
  EXPECT_TRUE(has(r.err, "truncated")) << r.err;
  EXPECT_TRUE(has(r.out, "resumed from run/checkpoints/iter-000000032.ckpt")) << r.out;
  EXPECT_TRUE(has(r.out, "done: 96 iterations")) << r.out;

  // A damaged file given by name: exit 1 and a message, not a crash.
  const fs::path bad = dir / "bad.ckpt";
  std::ofstream(bad) << "";
  r = run_to_end(dir, {"train", kTinyConfig, "--output", "run2", "--resume", bad.string()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "mintrain: error:") && has(r.err, "not a mintrain archive")) << r.err;

  // Every checkpoint damaged: refuse to start over silently.
  for (const auto& f : mt::apps::CheckpointDir::list((dir / "run" / "checkpoints").string())) {
    fs::resize_file(f, 10);
  }
  r = run_to_end(dir, {"train", kTinyConfig, "--set", "epochs=4", "--output", "run", "--resume", "auto"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "is damaged")) << r.err;
  fs::remove_all(dir);
}

namespace {

// 2 workers of a run long enough to be killed mid-way: 60 epochs of 16 steps, a checkpoint
// every 20 steps.
std::vector<std::string> launch_args(int max_restarts) {
  return {"launch", "--nproc-per-node", "2", "--max-restarts", std::to_string(max_restarts), "--",
          "train", kTinyConfig, "--set", "epochs=60", "--set", "checkpoint.every_iters=20",
          "--set", "logging.print_every_iters=200", "--output", "run"};
}

// Starts the launcher, waits for the first checkpoint, then SIGKILLs rank 1.
void kill_rank1_after_first_checkpoint(Process& p, const fs::path& dir) {
  ASSERT_TRUE(p.wait_until([&] { return any_checkpoint(dir / "run" / "checkpoints"); }, 60)) << p.out() << p.err();
  const pid_t victim = worker_of(p.pid(), 1);
  ASSERT_GT(victim, 0) << "no worker with RANK=1 under the launcher";
  ::kill(victim, SIGKILL);
}

}  // namespace

TEST(Reliability, LaunchRestartsTheGroupFromTheNewestCheckpoint) {
  const fs::path dir = temp_dir("restart");
  Process p(dir, launch_args(2));
  kill_rank1_after_first_checkpoint(p, dir);
  const int status = p.wait_exit(120);
  const std::string out = p.out(), err = p.err();
  ASSERT_EQ(status, 0) << out << err;
  EXPECT_TRUE(has(err, "mintrain launch: restart 1/2 after rank 1 exited with signal 9")) << err;
  EXPECT_FALSE(has(err, "restart 2/2")) << err;
  EXPECT_TRUE(has(out, "[rank 0] resumed from run/checkpoints/iter-")) << out;
  // Only rank 0 reports; had rank 1 started afresh, it would run more iterations than rank 0
  // and the job would fail in a collective instead of ending cleanly below.
  // Nothing lost: the restarted group ends at the same iteration as an uninterrupted run.
  EXPECT_TRUE(has(out, "[rank 0] done: 960 iterations")) << out;
  fs::remove_all(dir);
}

// Exact recovery: a group restarted after a worker's death ends with the weights, optimizer
// state and per-rank state, bit for bit, of a run that never died, for the algorithms whose
// resume the in-process tests (test_dist_resume.cpp) cannot reach: those with parameter servers,
// here with the server restarted too, and local SGD through the launcher.
class ExactRestart : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ExactRestart, EndsAsTheRunThatNeverDied) {
  const fs::path dir = temp_dir("exact_restart");
  auto args = [&](int max_restarts) {
    std::vector<std::string> a = {"launch", "--nproc-per-node", "2", "--max-restarts", std::to_string(max_restarts)};
    std::vector<std::string> train = {"--", "train", kTinyConfig, "--set", "epochs=20", "--set", "checkpoint.every_iters=20",
                                      "--set", "logging.print_every_iters=0", "--output", "run"};
    const std::vector<std::string>& settings = GetParam();
    for (size_t i = 0; i < settings.size(); ++i) {
      if (settings[i] == "--nservers") {
        a.insert(a.end(), {settings[i], settings[i + 1]});
        ++i;
      } else {
        train.insert(train.end(), {"--set", settings[i]});
      }
    }
    a.insert(a.end(), train.begin(), train.end());
    return a;
  };
  // The newest checkpoint of a run: its last.
  auto last = [](const fs::path& run) { return mt::apps::CheckpointDir::list((run / "checkpoints").string()).back(); };
  fs::create_directories(dir / "whole");
  fs::create_directories(dir / "killed");
  {
    Process whole(dir / "whole", args(0));
    ASSERT_EQ(whole.wait_exit(120), 0) << whole.err();
  }
  Process killed(dir / "killed", args(1));
  kill_rank1_after_first_checkpoint(killed, dir / "killed");
  ASSERT_EQ(killed.wait_exit(120), 0) << killed.out() << killed.err();
  ASSERT_TRUE(has(killed.err(), "restart 1/1")) << killed.err();
  const mt::core::Archive a = mt::core::load_archive(last(dir / "whole" / "run"));
  const mt::core::Archive b = mt::core::load_archive(last(dir / "killed" / "run"));
  EXPECT_EQ(a.meta.at("global_iteration"), b.meta.at("global_iteration"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name, x] = a.tensors[i];
    const mt::core::Tensor y = b.tensors[i].second;
    ASSERT_EQ(name, b.tensors[i].first);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.contiguous().raw_data(), y.contiguous().raw_data(), x.nbytes()), 0) << name << " differs";
  }
  fs::remove_all(dir);
}

std::string exact_restart_name(const ::testing::TestParamInfo<std::vector<std::string>>& info) {
  const char* names[] = {"Ps", "ByteSchedulerPs", "DlcpPs", "LocalSgd"};
  return names[info.index];
}

INSTANTIATE_TEST_SUITE_P(
    Reliability, ExactRestart,
    ::testing::Values(std::vector<std::string>{"--nservers", "1", "dist.algorithm=ps"},
                      std::vector<std::string>{"--nservers", "1", "dist.algorithm=bytescheduler",
                                               "dist.bytescheduler.architecture=ps", "dist.bytescheduler.credit_bytes=8192"},
                      std::vector<std::string>{"--nservers", "1", "dist.algorithm=dlcp", "dist.dlcp.architecture=ps"},
                      std::vector<std::string>{"dist.algorithm=local_sgd"}),
    exact_restart_name);

TEST(Reliability, LaunchWithoutRestartsFailsAsBefore) {
  const fs::path dir = temp_dir("no_restart");
  Process p(dir, launch_args(0));
  kill_rank1_after_first_checkpoint(p, dir);
  const int status = p.wait_exit(60);
  const std::string err = p.err();
  EXPECT_EQ(status, 1) << err;
  EXPECT_TRUE(has(err, "mintrain launch: rank 1 exited with signal 9 (Killed); stopped the other workers")) << err;
  EXPECT_FALSE(has(err, "restart")) << err;
  EXPECT_FALSE(has(p.out(), "done:")) << p.out();
  fs::remove_all(dir);
}

TEST(Reliability, LaunchForwardsSigtermAndDoesNotRestart) {
  const fs::path dir = temp_dir("launch_sigterm");
  Process p(dir, launch_args(3));
  ASSERT_TRUE(p.wait_until([&] { return any_checkpoint(dir / "run" / "checkpoints"); }, 60)) << p.err();
  p.signal(SIGTERM);
  const int status = p.wait_exit(60);
  const std::string out = p.out(), err = p.err();
  EXPECT_EQ(status, 143) << err;
  EXPECT_TRUE(has(out, "[rank 0] stopped at epoch")) << out;  // both ranks stopped together, checkpointed
  EXPECT_TRUE(has(err, "mintrain launch: interrupted (Terminated): forwarded to the workers, no restart")) << err;
  EXPECT_FALSE(has(err, "restart 1/")) << err;
  fs::remove_all(dir);
}

// A stop request to one worker (a scheduler or an admin signals one process): every rank stops
// at the same iteration with a checkpoint and exits 143, the rank that was not signalled too.
TEST(Reliability, SigtermToOneWorkerStopsEveryRankWith143) {
  const fs::path dir = temp_dir("one_worker_sigterm");
  const std::string port = std::to_string(mt::testing::free_port());
  std::vector<std::unique_ptr<Process>> ranks;
  for (const std::string rank : {"0", "1"}) {
    fs::create_directories(dir / rank);
    ranks.push_back(std::make_unique<Process>(
        dir / rank,
        std::vector<std::string>{"train", kTinyConfig, "--set", "epochs=100000", "--output", (dir / "run").string()},
        std::vector<std::string>{"RANK=" + rank, "WORLD_SIZE=2", "LOCAL_RANK=" + rank, "LOCAL_WORLD_SIZE=2",
                                 "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}));
  }
  ASSERT_TRUE(ranks[0]->wait_until([&] { return has(ranks[0]->out(), "epoch 1/100000 iter"); }, 60))
      << ranks[0]->out() << ranks[0]->err() << ranks[1]->err();
  ranks[1]->signal(SIGTERM);
  EXPECT_EQ(ranks[1]->wait_exit(60), 143) << ranks[1]->err();
  EXPECT_EQ(ranks[0]->wait_exit(60), 143) << ranks[0]->err();
  EXPECT_TRUE(has(ranks[0]->out(), "stopped at epoch")) << ranks[0]->out();
  EXPECT_TRUE(any_checkpoint(dir / "run" / "checkpoints"));
  fs::remove_all(dir);
}

// A stop request while a rank waits for the others to start ends the wait at once (not after
// dist.timeout_seconds), with the signal's status: on the rank that waits for rank 0 to host the
// store, and on rank 0 waiting for the others.
TEST(Reliability, AStopRequestDuringTheRendezvousEndsItAtOnce) {
  const fs::path dir = temp_dir("rendezvous_sigterm");
  for (const std::string rank : {"1", "0"}) {  // alone each time: the other never comes
    fs::create_directories(dir / rank);
    Process p(dir / rank, {"train", kTinyConfig, "--output", "run"},
              {"RANK=" + rank, "WORLD_SIZE=2", "LOCAL_RANK=" + rank, "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
               "MASTER_PORT=" + std::to_string(mt::testing::free_port())});
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const auto asked = Clock::now();
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait_exit(20), 143) << "rank " << rank << ": " << p.err();
    EXPECT_LT(Clock::now() - asked, std::chrono::seconds(5)) << "rank " << rank;
    EXPECT_TRUE(has(p.err(), "stopped (a stop request) while waiting for rank")) << p.err();
  }
  fs::remove_all(dir);
}

// A host whose own name does not resolve (common in containers and on fresh VMs) trains across
// "machines": each rank binds the address that reaches MASTER_ADDR (once a crash inside Gloo).
// Needs root for a UTS namespace with such a host name; skipped without.
TEST(Reliability, AHostNameThatDoesNotResolveIsNoCrash) {
  if (::geteuid() != 0 || std::system("unshare -u true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and unshare(1) for a host name of its own";
  // A local address that is not loopback, so that the job counts as several machines.
  std::string address = mt::testing::run_command("hostname -I | awk '{print $1}'").out;
  address.erase(address.find_last_not_of(" \n") + 1);
  if (address.empty() || address.rfind("127.", 0) == 0) GTEST_SKIP() << "no address besides loopback";
  const fs::path dir = temp_dir("unresolvable_host");
  const std::string port = std::to_string(mt::testing::free_port());
  std::string script = "hostname mintrain-test-host-that-does-not-resolve.invalid; cd " + dir.string() + "; ";
  for (const std::string rank : {"0", "1"})
    script += "(mkdir -p " + rank + " && cd " + rank + " && RANK=" + rank + " WORLD_SIZE=2 LOCAL_RANK=0 "
              "LOCAL_WORLD_SIZE=1 MASTER_ADDR=" + address + " MASTER_PORT=" + port + " OMP_NUM_THREADS=1 timeout 60 " +
              kBinary + " train " + kTinyConfig + " --set max_steps=2 --output run > out 2>&1; echo $? > rc) & ";
  script += "wait";
  ASSERT_EQ(std::system(("unshare -u bash -c '" + script + "'").c_str()), 0);
  for (const std::string rank : {"0", "1"}) {
    EXPECT_EQ(slurp(dir / rank / "rc"), "0\n") << "rank " << rank << ": " << slurp(dir / rank / "out");
  }
  EXPECT_TRUE(has(slurp(dir / "0" / "out"), "process group gloo/tcp world of 2")) << slurp(dir / "0" / "out");
  fs::remove_all(dir);
}

// The same through `mintrain launch`: the job stopped, it did not fail; nothing restarts.
TEST(Reliability, LaunchStopsWhenOneWorkerIsSentSigterm) {
  const fs::path dir = temp_dir("launch_worker_sigterm");
  Process p(dir, launch_args(3));
  ASSERT_TRUE(p.wait_until([&] { return any_checkpoint(dir / "run" / "checkpoints"); }, 60)) << p.err();
  const pid_t rank1 = worker_of(p.pid(), 1);
  ASSERT_GT(rank1, 0);
  ::kill(rank1, SIGTERM);
  const int status = p.wait_exit(60);
  const std::string out = p.out(), err = p.err();
  EXPECT_EQ(status, 143) << err;
  EXPECT_TRUE(has(out, "[rank 0] stopped at epoch")) << out;
  EXPECT_TRUE(has(err, "mintrain launch: a stop request (Terminated) reached the workers, not launch")) << err;
  EXPECT_TRUE(has(err, "the job stopped, no restart")) << err;
  EXPECT_FALSE(has(err, "restart 1/")) << err;
  fs::remove_all(dir);
}

// A dropped ssh session hangs up the launcher (or `train` itself): a stop with a checkpoint,
// as SIGTERM is. launch passes it on as SIGTERM, which parameter servers ignore too.
TEST(Reliability, SighupStopsWithACheckpoint) {
  const fs::path dir = temp_dir("sighup");
  Process p(dir, launch_args(3));
  ASSERT_TRUE(p.wait_until([&] { return any_checkpoint(dir / "run" / "checkpoints"); }, 60)) << p.err();
  p.signal(SIGHUP);
  const int status = p.wait_exit(60);
  const std::string out = p.out(), err = p.err();
  EXPECT_EQ(status, 129) << err;
  EXPECT_TRUE(has(err, "mintrain launch: interrupted (Hangup): forwarded to the workers, no restart")) << err;
  EXPECT_TRUE(has(out, "[rank 0] stopped at epoch")) << out;
  EXPECT_FALSE(has(err, "restart 1/")) << err;

  fs::create_directories(dir / "alone");
  Process alone(dir / "alone", {"train", kTinyConfig, "--set", "epochs=100000", "--output", "run"});
  ASSERT_TRUE(alone.wait_until([&] { return has(alone.out(), "epoch 1/100000 iter"); }, 60)) << alone.err();
  alone.signal(SIGHUP);
  EXPECT_EQ(alone.wait_exit(30), 129) << alone.err();
  EXPECT_TRUE(has(alone.err(), "SIGHUP (the terminal or ssh session hung up): stopping after this iteration"))
      << alone.err();
  EXPECT_TRUE(has(alone.out(), "stopped at epoch")) << alone.out();
  EXPECT_TRUE(any_checkpoint(dir / "alone" / "run" / "checkpoints"));
  fs::remove_all(dir);
}

// A worker that dies in the first epoch, before any checkpoint: the restart starts the run over
// instead of refusing the folder the dead run left.
TEST(Reliability, LaunchRestartsAGroupThatDiedBeforeItsFirstCheckpoint) {
  const fs::path dir = temp_dir("first_epoch");
  Process p(dir, {"launch", "--nproc-per-node", "2", "--max-restarts", "1", "--", "train", kTinyConfig, "--set",
                  "epochs=1", "--set", "data.synthetic.size=32768", "--set", "logging.print_every_iters=8",
                  "--output", "run"});
  ASSERT_TRUE(p.wait_until([&] { return has(p.out(), "[rank 0] epoch 1/1 iter 8/"); }, 60)) << p.out() << p.err();
  ASSERT_FALSE(any_checkpoint(dir / "run" / "checkpoints"));
  const pid_t rank1 = worker_of(p.pid(), 1);
  ASSERT_GT(rank1, 0);
  ::kill(rank1, SIGKILL);
  const int status = p.wait_exit(120);
  const std::string out = p.out(), err = p.err();
  EXPECT_EQ(status, 0) << out << err;
  EXPECT_TRUE(has(err, "mintrain launch: restart 1/1 after rank 1 exited with signal 9")) << err;
  EXPECT_TRUE(has(out, "[rank 0] --resume auto: no checkpoint to continue from")) << out;
  EXPECT_TRUE(has(out, "[rank 0] done: 512 iterations")) << out;
  fs::remove_all(dir);
}

// A damaged checkpoint that --resume auto skipped is moved aside: it no longer counts toward
// keep_last, so the rotation keeps good ones instead.
TEST(Reliability, ADamagedCheckpointSkippedIsMovedAsideAndNotCounted) {
  const fs::path dir = temp_dir("damaged_aside");
  ASSERT_EQ(run_to_end(dir, {"train", kTinyConfig, "--set", "epochs=2", "--output", "run"}).status, 0);
  const fs::path ckpts = dir / "run" / "checkpoints";
  const auto files = mt::apps::CheckpointDir::list(ckpts.string());
  ASSERT_EQ(files.size(), 2u);  // iterations 32 and 64 (keep_last 2)
  fs::resize_file(files[1], fs::file_size(files[1]) / 2);
  const Result r = run_to_end(dir, {"train", kTinyConfig, "--set", "max_steps=48", "--set", "checkpoint.every_iters=8",
                                    "--output", "run", "--resume", "auto"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string damaged = "run/checkpoints/" + fs::path(files[1]).filename().string();
  EXPECT_TRUE(has(r.out, "note: the damaged checkpoint " + damaged + " was moved to " + damaged + ".damaged")) << r.out;
  EXPECT_TRUE(fs::exists(files[1] + ".damaged"));
  std::vector<int64_t> kept;
  for (const auto& f : mt::apps::CheckpointDir::list(ckpts.string())) {
    kept.push_back(mt::apps::CheckpointDir::iteration_in_name(f));
    EXPECT_NO_THROW((void)mt::core::load_archive(f)) << f;
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{40, 48}));
  fs::remove_all(dir);
}

TEST(Reliability, LaunchRejectsABadMaxRestarts) {
  const fs::path dir = temp_dir("bad_restarts");
  const Result r = run_to_end(dir, {"launch", "--nproc-per-node", "2", "--max-restarts", "-1", "--", "version"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--max-restarts needs a number")) << r.err;
  fs::remove_all(dir);
}

TEST(Reliability, HostileIdxHeadersAreClearErrors) {
  const fs::path dir = temp_dir("idx");
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char((v >> 16) & 0xFF), char((v >> 8) & 0xFF), char(v & 0xFF)};
  };
  struct Case {
    std::string name, bytes, expected;
  };
  const std::vector<Case> cases = {
      // Three 32-bit sizes whose product overflows 64 bits (found by fuzz_idx's kind of input).
      {"overflow", be32(0x803) + be32(0xFFFFFFFF) + be32(0xFFFFFFFF) + be32(0xFFFFFFFF), "implausible size"},
      {"overflow_to_small", be32(0x803) + be32(0x80000000) + be32(0x80000000) + be32(4) + "abcd", "implausible size"},
      // Claims 4 GiB, holds 10 bytes: must fail on the length, not try to allocate 4 GiB first.
      {"huge_claim", be32(0x803) + be32(0x10000) + be32(0x100) + be32(0x100) + std::string(10, 'x'), "truncated"},
      {"header_cut", be32(0x803) + be32(2), "truncated"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path path = dir / c.name;
    std::ofstream(path, std::ios::binary) << c.bytes;
    try {
      (void)mt::data::read_idx_file(path.string(), 0x803);
      ADD_FAILURE() << "a hostile IDX file was accepted";
    } catch (const mt::core::Error& e) {
      EXPECT_TRUE(has(e.what(), c.expected)) << e.what();
      EXPECT_TRUE(has(e.what(), path.string())) << e.what();
    }
  }
  fs::remove_all(dir);
}

namespace {

// The bytes of a well-formed archive (core/serialize.cpp's layout, right size field and
// checksum) holding one empty float tensor "w" of the given shape.
std::string archive_with_empty_tensor(const std::vector<int64_t>& shape) {
  std::string body;
  auto put = [&body](const auto& v) { body.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint64_t{1});  // one record
  put(uint8_t{1});   // a tensor
  put(uint32_t{1});
  body += "w";
  put(uint8_t{0});   // float32
  put(static_cast<uint32_t>(shape.size()));
  for (const int64_t d : shape) put(d);
  put(uint64_t{0});  // no bytes: it is empty
  std::string file = "MTARCHV1";
  const uint32_t version = 1;
  const uint64_t body_size = body.size();
  file.append(reinterpret_cast<const char*>(&version), sizeof(version));
  file.append(reinterpret_cast<const char*>(&body_size), sizeof(body_size));
  file += body;
  const auto crc = static_cast<uint32_t>(::crc32(
      ::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(file.data()), static_cast<uInt>(file.size())));
  file.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return file;
}

}  // namespace

// Found by fuzz_checkpoint: an empty tensor whose other sizes multiply past 64 bits passed the
// byte-count check and overflowed in Tensor::empty's shape arithmetic.
TEST(Reliability, ArchiveWithAnImpossibleEmptyShapeIsAClearError) {
  const fs::path dir = temp_dir("archive_shape");
  const fs::path path = dir / "shape.ckpt";
  std::ofstream(path, std::ios::binary) << archive_with_empty_tensor({int64_t(1) << 40, int64_t(1) << 40, 0});
  try {
    (void)mt::core::load_archive(path.string());
    ADD_FAILURE() << "an archive with an impossible shape loaded";
  } catch (const mt::core::Error& e) {
    EXPECT_TRUE(has(e.what(), "impossible shape")) << e.what();
  }
  // An empty shape that fits loads: the check is not too strict.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << archive_with_empty_tensor({3, 0, 1000});
  const mt::core::Archive a = mt::core::load_archive(path.string());
  ASSERT_EQ(a.tensors.size(), 1u);
  EXPECT_EQ(a.tensors[0].second.shape(), (mt::core::Shape{3, 0, 1000}));
  fs::remove_all(dir);
}

TEST(Reliability, CudaOutOfMemorySaysWhatWasAskedAndWhatIsFree) {
  if (!mt::core::cuda_available()) GTEST_SKIP() << "no CUDA device (or a CPU-only build): OOM message not checked";
  try {
    // 4 TiB: more than any GPU has.
    (void)mt::core::Tensor::empty({int64_t(1) << 40}, mt::core::DType::Float32, mt::core::Device::cuda(0));
    FAIL() << "a 4 TiB allocation succeeded";
  } catch (const mt::core::Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(has(what, "CUDA out of memory: asked for 4194304.0 MiB on cuda:0")) << what;
    EXPECT_TRUE(std::regex_search(what, std::regex("\\d+\\.\\d MiB free of \\d+\\.\\d MiB"))) << what;
    EXPECT_TRUE(has(what, "cached by mintrain:")) << what;
    EXPECT_TRUE(has(what, "data.batch_size")) << what;
  }
  // The allocator still works after the failure.
  auto small = mt::core::Tensor::empty({1024}, mt::core::DType::Float32, mt::core::Device::cuda(0));
  EXPECT_EQ(small.numel(), 1024);
}
