// `mintrain launch`: N local workers with the launch variables, prefixed output, a failing
// worker stopping the job with a message naming its rank, torchrun's spellings of the options,
// workers dying with a SIGKILLed launcher, and no restarts after a permanent error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "apps/launch.h"
#include "apps/run_folder.h"
#include "core/error.h"
#include "support/multiprocess.h"

namespace fs = std::filesystem;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";
const std::string kConfigs = std::string(MT_SOURCE_DIR) + "/configs/";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Result run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = "cd " + dir.string() + " && OMP_NUM_THREADS=1 timeout 60 " + kBinary + " " + args +
                          " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int raw = std::system(cmd.c_str());
  Result r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove_all(dir);
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Launch, RunsWorkersAndPrefixesTheirOutput) {
  const Result r = run("launch --nproc-per-node 2 -- help");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 0] usage: mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1] usage: mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1]   model.name: ")) << r.out;
}

TEST(Launch, MultiNodeRanksAreOffsetByNodeRank) {
  // Node 1 of 2 runs ranks 2 and 3; `version` needs no rendezvous.
  const Result r = run("launch --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -- version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 2] mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 3] mintrain")) << r.out;
}

TEST(Launch, FailingWorkerStopsTheJobAndIsNamed) {
  // A failure a restart might fix (another run holds the output folder now); a config error is
  // permanent and has its own tests below.
  const fs::path out = fs::temp_directory_path() / ("mt_test_launch_busy_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const mt::apps::RunFolder holder({out.string(), "", ""}, mt::apps::RunFolderMode::Fresh, nullptr);
  const Result r = run("launch --nproc-per-node 2 -- train " + kConfigs + "mlp_synthetic.prototxt --output " +
                       out.string());
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "] mintrain: error: ")) << r.err;
  EXPECT_TRUE(has(r.err, "is in use by another run")) << r.err;
  EXPECT_TRUE(has(r.err, "mintrain launch: rank ")) << r.err;
  EXPECT_TRUE(has(r.err, "exited with exit status 1; stopped the other workers")) << r.err;
  fs::remove_all(out);
}

// A missing dataset folder is no failure a restart fixes: launch stops at once with the
// worker's 3, for whoever runs launch (a script, Slurm) to see it is permanent too.
TEST(Launch, AMissingDatasetIsPermanent) {
  const Result r = run("launch --nproc-per-node 2 --max-restarts 2 -- train " + kConfigs +
                       "lenet_fashion_mnist.prototxt --set data.path=/nonexistent/fmnist");
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "/nonexistent/fmnist")) << r.err;
  EXPECT_TRUE(has(r.err, "exited with exit status 3: a permanent error")) << r.err;
  EXPECT_FALSE(has(r.err, "restart 1/2")) << r.err;
}

TEST(Launch, BadArgumentsAreUsageErrors) {
  Result r = run("launch --nproc-per-node 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "put the worker's arguments after --")) << r.err;
  r = run("launch --nproc-per-node x -- help");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "--nproc-per-node needs a number")) << r.err;
  r = run("launch --bogus 1 -- help");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "unknown option \"--bogus\"")) << r.err;
}

TEST(Launch, AcceptsTorchrunSpellingsOfEveryOption) {
  const auto o = mt::apps::parse_launch_args(
      {"--nproc-per-node=3", "--nnodes=4", "--node-rank=2", "--master-addr=10.0.0.1", "--master-port=1234",
       "--max-restarts=5", "--grace=7", "--stop-timeout=9", "--", "train", "c.prototxt"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 5);
  EXPECT_EQ(o.grace_seconds, 7);
  EXPECT_EQ(o.stop_timeout_seconds, 9);
  EXPECT_EQ(o.command, (std::vector<std::string>{"train", "c.prototxt"}));

  const auto u = mt::apps::parse_launch_args({"--nproc_per_node", "2", "--nnodes", "3", "--node_rank=1",
                                              "--master_addr", "h", "--master_port=29501", "--max_restarts",
                                              "1", "--stop_timeout=4", "--", "version"});
  EXPECT_EQ(u.nproc_per_node, 2);
  EXPECT_EQ(u.nnodes, 3);
  EXPECT_EQ(u.node_rank, 1);
  EXPECT_EQ(u.master_addr, "h");
  EXPECT_EQ(u.master_port, 29501);
  EXPECT_EQ(u.max_restarts, 1);
  EXPECT_EQ(u.stop_timeout_seconds, 4);
  // `=` after the `--` belongs to the worker's command.
  const auto w = mt::apps::parse_launch_args({"--", "train", "--set=epochs=1"});
  EXPECT_EQ(w.command, (std::vector<std::string>{"train", "--set=epochs=1"}));
  EXPECT_THROW(mt::apps::parse_launch_args({"--nproc-per-node=", "--", "help"}), mt::core::Error);
  EXPECT_THROW(mt::apps::parse_launch_args({"--nproc-per-node=two", "--", "help"}), mt::core::Error);
}

TEST(Launch, FlagEqualsValueFormRunsWorkers) {
  const Result r = run("launch --nproc_per_node=2 --nnodes=2 --node_rank=1 --master_addr=127.0.0.1 -- version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 2] mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 3] mintrain")) << r.out;
}

namespace {

// The processes whose parent is `parent` (scanning /proc).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(entry.path() / "stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

// Gone, or a zombie nobody reaps (PID 1 of a container may not).
bool is_dead(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return stat.empty() || paren == std::string::npos || stat[paren + 2] == 'Z';
}

}  // namespace

TEST(Launch, SigkilledLauncherLeavesNoWorkerAlive) {
  // Node 1 of 2 with nothing at the master port: its workers wait at rendezvous for minutes,
  // which makes them long-running workers that cost no CPU.
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_kill_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string port = std::to_string(mt::testing::free_port());
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    if (::chdir(dir.c_str()) != 0 || !std::freopen("stdout", "w", stdout) || !std::freopen("stderr", "w", stderr)) {
      ::_exit(126);
    }
    ::execl(kBinary.c_str(), kBinary.c_str(), "launch", "--nproc-per-node=2", "--nnodes=2", "--node-rank=1",
            "--master-addr=127.0.0.1", ("--master-port=" + port).c_str(), "--", "train",
            (kConfigs + "mlp_synthetic.prototxt").c_str(), nullptr);
    ::_exit(127);
  }
  std::vector<pid_t> workers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (workers.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers = children_of(launcher);
  }
  ASSERT_EQ(workers.size(), 2u) << slurp(dir / "stderr");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let them reach rendezvous
  for (const pid_t w : workers) ASSERT_FALSE(is_dead(w)) << "a worker ended early:\n" << slurp(dir / "stderr");
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);

  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  auto all_dead = [&] {
    for (const pid_t w : workers) {
      if (!is_dead(w)) return false;
    }
    return true;
  };
  while (!all_dead() && std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool dead = all_dead();
  for (const pid_t w : workers) ::kill(w, SIGKILL);  // never leave them behind, pass or fail
  EXPECT_TRUE(dead) << "workers outlived their SIGKILLed launcher by 1.5 s";
  fs::remove_all(dir);
}

TEST(Launch, UsageErrorOfAWorkerIsPermanentAndNotRestarted) {
  const Result r = run("launch --nproc-per-node 2 --max-restarts 3 -- train --bogus-option x");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "exited with exit status 2: a permanent error")) << r.err;
  EXPECT_TRUE(has(r.err, "so the 3 restart(s) left were skipped")) << r.err;
  EXPECT_FALSE(has(r.err, "restart 1/3")) << r.err;
}

namespace {

// A worker program that notes each start (its MINTRAIN_RESTART_COUNT) in `log`, then exits
// with `status`.
fs::path write_worker_script(const fs::path& dir, int status) {
  const fs::path script = dir / ("worker_exit_" + std::to_string(status) + ".sh");
  std::ofstream(script) << "#!/bin/sh\necho \"start $MINTRAIN_RESTART_COUNT\" >> \"$1\"\nexit " << status << "\n";
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

}  // namespace

TEST(Launch, ConfigErrorOfAWorkerStopsRestartsButOtherFailuresRestart) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_perm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  mt::apps::LaunchOptions o;
  o.max_restarts = 2;
  o.grace_seconds = 1;

  // Exit 3 (a config error): one start, no restart.
  o.command = {(dir / "starts3").string()};
  ::testing::internal::CaptureStderr();
  int status = mt::apps::run_launch(o, write_worker_script(dir, 3).string());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 3) << err;
  EXPECT_EQ(slurp(dir / "starts3"), "start 0\n") << err;
  EXPECT_TRUE(has(err, "rank 0 exited with exit status 3: a permanent error")) << err;
  EXPECT_TRUE(has(err, "so the 2 restart(s) left were skipped")) << err;

  // Exit 1 (anything else): restarted until the restarts run out.
  o.command = {(dir / "starts1").string()};
  ::testing::internal::CaptureStderr();
  status = mt::apps::run_launch(o, write_worker_script(dir, 1).string());
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 1) << err;
  EXPECT_EQ(slurp(dir / "starts1"), "start 0\nstart 1\nstart 2\n") << err;
  EXPECT_TRUE(has(err, "restart 2/2 after rank 0 exited with exit status 1")) << err;
  EXPECT_FALSE(has(err, "permanent")) << err;
  fs::remove_all(dir);
}

namespace {

// The RANK a worker process was started with (from its environment), or -1.
int rank_of(pid_t pid) {
  const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
  for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
    if (env.compare(at, 5, "RANK=") == 0) return std::atoi(env.c_str() + at + 5);
    if (env.find('\0', at) == std::string::npos) break;
  }
  return -1;
}

}  // namespace

TEST(Launch, StoppedWorkerIsNamedNotTheRankThatTimedOut) {
  // Rank 1 is stopped mid-training (as SIGSTOP or a debugger would); rank 0's gradient
  // allreduce times out after dist.timeout_seconds and rank 0 exits first. Both rank 0's
  // error and launch's report must name rank 1.
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_hung_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    if (::chdir(dir.c_str()) != 0 || !std::freopen("stdout", "w", stdout) || !std::freopen("stderr", "w", stderr)) {
      ::_exit(126);
    }
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::execl(kBinary.c_str(), kBinary.c_str(), "launch", "--nproc-per-node=2", "--grace=1", "--", "train",
            (kConfigs + "mlp_synthetic.prototxt").c_str(), "--set", "epochs=100000", "--set",
            "dist.timeout_seconds=3", "--output", "run", nullptr);
    ::_exit(127);
  }
  // Stop rank 1 once training runs (rank 0 has printed a progress line).
  pid_t rank1 = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rank1 < 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!has(slurp(dir / "stdout"), "[rank 0] epoch 1/")) continue;
    for (const pid_t w : children_of(launcher)) {
      if (rank_of(w) == 1) rank1 = w;
    }
  }
  ASSERT_GT(rank1, 0) << slurp(dir / "stdout") << slurp(dir / "stderr");
  ::kill(rank1, SIGSTOP);
  int status = 0;
  pid_t done = 0;
  const auto exit_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((done = ::waitpid(launcher, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < exit_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
  }
  ::kill(rank1, SIGKILL);
  const std::string err = slurp(dir / "stderr");
  ASSERT_NE(done, 0) << "launch did not end after a worker was stopped\n" << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << err;
  EXPECT_TRUE(has(err, "[rank 0] mintrain: error: ")) << err;
  EXPECT_TRUE(has(err, "timed out after 3 s waiting for a peer; rank(s) 1 did not answer")) << err;
  EXPECT_TRUE(has(err, "mintrain launch: rank(s) 1 (stopped) still ran when rank 0 failed")) << err;
  fs::remove_all(dir);
}

// A stop signal sent to a worker itself (by a scheduler, an admin, a dropped session): that
// worker exits 128 + it, the others stop with it, and the job stopped; it did not fail.
TEST(Launch, AWorkerStoppedBySignalStopsTheJobWithoutARestart) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_stop_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  mt::apps::LaunchOptions o;
  o.nproc_per_node = 2;
  o.max_restarts = 2;
  for (const int sig : {SIGTERM, SIGHUP}) {
    SCOPED_TRACE(sig);
    const fs::path starts = dir / ("starts" + std::to_string(sig));
    o.command = {starts.string()};
    ::testing::internal::CaptureStderr();
    const int status = mt::apps::run_launch(o, write_worker_script(dir, 128 + sig).string());
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(status, 128 + sig) << err;
    EXPECT_EQ(slurp(starts), "start 0\nstart 0\n") << err;
    const std::string request = "a stop request (" + std::string(::strsignal(sig)) + ")";
    EXPECT_TRUE(has(err, request + " reached the workers, not launch (rank ")) << err;
    EXPECT_TRUE(has(err, "the job stopped, no restart")) << err;
    EXPECT_FALSE(has(err, "restart 1/2")) << err;
  }
  fs::remove_all(dir);
}

// Ranks started with different --output: the error names the field and the rank, and is a
// config error (not restarted).
TEST(Launch, RanksWithDifferentConfigsAreToldWhatDiffers) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_differ_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path script = dir / "worker.sh";
  std::ofstream(script) << "#!/bin/sh\nexec " << kBinary << " train " << kConfigs
                        << "mlp_synthetic.prototxt --set max_steps=2 --output " << (dir / "out").string()
                        << "$RANK\n";
  fs::permissions(script, fs::perms::owner_all);
  mt::apps::LaunchOptions o;
  o.nproc_per_node = 2;
  o.max_restarts = 1;
  o.grace_seconds = 1;
  o.command = {};
  ::testing::internal::CaptureStderr();
  ::setenv("OMP_NUM_THREADS", "1", 1);
  const int status = mt::apps::run_launch(o, script.string());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 3) << err;
  EXPECT_TRUE(has(err, "the ranks do not run one config")) << err;
  EXPECT_TRUE(has(err, "rank 1: modified: output_dir: \"" + (dir / "out").string() + "0\" -> \"" +
                           (dir / "out").string() + "1\"")) << err;
  EXPECT_FALSE(has(err, "restart 1/1")) << err;
  fs::remove_all(dir);
}
