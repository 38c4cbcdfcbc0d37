// apps/scripts/launch_ssh.sh and launch_slurm.sbatch, with stand-ins for ssh, scontrol and srun
// on PATH: the ssh stand-in runs the remote command on this machine (two "hosts" of one node
// each), or fails as an unreachable host does (exit 255). The job stops as a whole on SIGTERM
// to the script and nothing of it is left; a host whose ssh fails is named at once and the rest
// stopped; ssh gets a connect timeout and MT_SSH_OPTS; a failing scontrol stops the batch job.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "support/background_process.h"
#include "support/multiprocess.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";
const std::string kScripts = std::string(MT_SOURCE_DIR) + "/apps/scripts/";
const std::string kTinyConfig = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void write_program(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
}

// A folder with the stand-ins in bin/ and the job's files beside.
fs::path make_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("mt_test_launch_scripts_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  write_program(dir / "bin" / "ssh",
                "#!/bin/bash\n"
                "echo \"$*\" >> \"$FAKE_SSH_LOG\"\n"
                "while [[ $# -gt 0 ]]; do\n"
                "  case \"$1\" in -o|-p|-i|-l) shift 2 ;; -*) shift ;; *) break ;; esac\n"
                "done\n"
                "host=$1; shift\n"
                "if [[ $host == unreachable ]]; then\n"
                "  echo \"ssh: connect to host $host port 22: Connection timed out\" >&2; exit 255\n"
                "fi\n"
                "exec bash -c \"$*\"\n");
  return dir;
}

// The pids of processes whose environment holds `entry`.
std::vector<pid_t> processes_with(const std::string& entry) {
  std::vector<pid_t> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = slurp(e.path() / "environ");
    for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
      if (env.compare(at, entry.size() + 1, entry + '\0') == 0) found.push_back(std::stoi(name));
      if (env.find('\0', at) == std::string::npos) break;
    }
  }
  return found;
}

// launch_ssh.sh HOSTFILE -- train ..., run in `dir` in the background, ssh being the stand-in
// in dir/bin.
std::vector<std::string> ssh_job_argv(const fs::path& dir, const std::string& hosts,
                                      const std::vector<std::string>& train_args) {
  std::ofstream(dir / "hosts") << hosts;
  std::vector<std::string> args = {"bash", kScripts + "launch_ssh.sh", "hosts", "--master-port",
                                   std::to_string(mt::testing::free_port()), "--", "train", kTinyConfig};
  args.insert(args.end(), train_args.begin(), train_args.end());
  return args;
}
struct SshJob : mt::testing::BackgroundProcess {
  SshJob(const fs::path& dir, const std::string& hosts, const std::vector<std::string>& train_args,
         const std::string& token)
      : BackgroundProcess(dir, ssh_job_argv(dir, hosts, train_args),
                          {"PATH=" + (dir / "bin").string() + ":" + std::getenv("PATH"),
                           "FAKE_SSH_LOG=" + (dir / "ssh.log").string(), "MINTRAIN=" + kBinary,
                           "MINTRAIN_JOB_TOKEN=" + token, "MT_SSH_OPTS=-o StrictHostKeyChecking=no -p 2222",
                           "MT_STOP_TIMEOUT=30"}) {}
};

}  // namespace

TEST(LaunchSsh, SigtermStopsEveryHostsJobWithACheckpointAndLeavesNothing) {
  const fs::path dir = make_dir("stop");
  const std::string token = "stoptest" + std::to_string(::getpid());
  SshJob job(dir, "127.0.0.1\nlocalhost\n", {"--set", "epochs=100000", "--output", "run"}, token);
  ASSERT_TRUE(job.wait_until([&] { return has(job.out(), "[127.0.0.1] [rank 0] epoch 1/100000 iter"); }, 90))
      << job.out() << job.err();
  job.signal(SIGTERM);
  const int status = job.wait_exit(60);
  const std::string out = job.out(), err = job.err();
  EXPECT_EQ(status, 143) << out << err;
  EXPECT_TRUE(has(err, "launch_ssh: SIGTERM: stopping the job on every host")) << err;
  EXPECT_TRUE(has(out, "[rank 0] stopped at epoch")) << out;  // with a checkpoint
  EXPECT_FALSE(has(err, "still ran pids")) << err;
  const std::vector<pid_t> left = processes_with("MT_SSH_JOB=" + token);
  for (const pid_t p : left) ::kill(p, SIGKILL);
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the job outlived the stop";
  // ssh got the connect timeout and the options of MT_SSH_OPTS.
  const std::string ssh = slurp(dir / "ssh.log");
  EXPECT_TRUE(has(ssh, "-o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=no -p 2222 -tt 127.0.0.1"))
      << ssh;
  fs::remove_all(dir);
}

TEST(LaunchSsh, AHostWhoseSshFailsIsNamedAndTheOthersStopAtOnce) {
  const fs::path dir = make_dir("unreachable");
  const std::string token = "deadhost" + std::to_string(::getpid());
  const auto start = Clock::now();
  SshJob job(dir, "127.0.0.1\nunreachable\n", {"--set", "dist.timeout_seconds=5", "--output", "run"}, token);
  const int status = job.wait_exit(60);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string err = job.err();
  EXPECT_EQ(status, 255) << err;
  EXPECT_TRUE(has(err, "launch_ssh: unreachable: ssh failed (exit 255")) << err;
  EXPECT_TRUE(has(err, "stopping the job on the other hosts")) << err;
  EXPECT_LT(seconds, 40) << "the master's launcher waited for the dead host";
  const std::vector<pid_t> left = processes_with("MT_SSH_JOB=" + token);
  for (const pid_t p : left) ::kill(p, SIGKILL);
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the job outlived the stop";
  fs::remove_all(dir);
}

// `export X=$(...)` would hide a failing scontrol; the job must stop before srun.
TEST(LaunchSlurm, AFailingScontrolStopsTheJobBeforeSrun) {
  const fs::path dir = make_dir("slurm");
  write_program(dir / "bin" / "srun", "#!/bin/sh\necho \"srun MASTER_ADDR=$MASTER_ADDR $*\" >> srun.log\n");
  const std::string run = "cd " + dir.string() + " && PATH=" + (dir / "bin").string() +
                          ":$PATH SLURM_JOB_NODELIST='node[1-2]' SLURM_JOB_ID=42 SLURM_SUBMIT_DIR=. bash " + kScripts +
                          "launch_slurm.sbatch c.prototxt >out 2>err";
  write_program(dir / "bin" / "scontrol", "#!/bin/sh\necho 'scontrol: error: Invalid node list' >&2\nexit 1\n");
  int raw = std::system(run.c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) != 0) << slurp(dir / "err");
  EXPECT_TRUE(has(slurp(dir / "err"), "Invalid node list")) << slurp(dir / "err");
  EXPECT_FALSE(fs::exists(dir / "srun.log")) << "srun ran without a master";

  write_program(dir / "bin" / "scontrol", "#!/bin/sh\nprintf 'node1\\nnode2\\n'\n");
  raw = std::system(run.c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << slurp(dir / "err");
  EXPECT_TRUE(has(slurp(dir / "srun.log"), "srun MASTER_ADDR=node1 --label")) << slurp(dir / "srun.log");
  fs::remove_all(dir);
}
