#include "apps/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "apps/flags.h"
#include "core/error.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "dist/comm/socket.h"

namespace mt::apps {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
extern "C" void on_launch_signal(int sig) { g_signal.store(sig); }

int to_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0 || x > 1000000)
    throw FlagError("launch: " + flag + " needs a number, got \"" + v + "\"");
  return static_cast<int>(x);
}

struct Worker {  // a worker or a parameter server
  int rank = 0;
  pid_t pid = -1;
  int status = 0;
  bool done = false;
  std::string label;  // "rank 3", "server 0"
};

// One thread reads every worker's stdout and stderr and prints whole lines with the rank in
// front, so lines of different workers never interleave mid-line.
class OutputPump {
 public:
  void add(int fd, std::string label, bool is_err) { streams_.push_back({fd, std::move(label), is_err, {}}); }
  void start() { thread_ = std::thread([this] { run(); }); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Stream {
    int fd;
    std::string label;  // "rank 3", "server 0"
    bool is_err;
    std::string partial;
  };
  void emit(Stream& s, const std::string& line) {
    const std::string out = "[" + s.label + "] " + line + "\n";
    FILE* to = s.is_err ? stderr : stdout;
    std::fwrite(out.data(), 1, out.size(), to);  // one locked call a line: lines never interleave
    std::fflush(to);
  }
  void run() {
    char buf[65536];
    while (true) {
      std::vector<pollfd> fds;
      std::vector<Stream*> who;
      for (auto& s : streams_) {
        if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0}), who.push_back(&s);
      }
      if (fds.empty()) return;  // every worker closed its output
      if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) return;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Stream& s = *who[i];
        const ssize_t r = ::read(s.fd, buf, sizeof(buf));
        if (r > 0) {
          s.partial.append(buf, static_cast<size_t>(r));
          size_t nl;
          while ((nl = s.partial.find('\n')) != std::string::npos) {
            emit(s, s.partial.substr(0, nl));
            s.partial.erase(0, nl + 1);
          }
        } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
          if (!s.partial.empty()) emit(s, s.partial);
          s.partial.clear();
          dist::net::close_fd(s.fd);
        }
      }
    }
  }
  std::vector<Stream> streams_;
  std::thread thread_;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

std::string random_token() {
  std::random_device rd;
  return core::formatted("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

// How one start of the worker group ended.
struct GroupOutcome {
  int interrupt = 0;        // the stop request: the signal launch got and forwarded, or the one a
                            // worker was sent directly (0: none)
  std::string stopped_by;   // the first worker that stopped on it ("" when launch got it)
  int failed_rank = -1;     // the first worker that failed (-1: none)
  std::string failed_label; // "rank 1", "server 0 (rank 4)"
  int failed_status = 0;    // its waitpid status
  // The workers still running when the first one failed, e.g. "1 (stopped), 3": when the
  // failure is a timeout, these are the ranks the failed one was waiting for.
  std::string running_at_failure;
};

// The scheduler state of a process ('R', 'S', 'D', 'T' stopped, 't' traced), or 0 if unknown.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may itself contain spaces or ')'
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

std::string running_workers(const std::vector<Worker>& workers) {
  std::string out;
  for (const auto& w : workers) {
    if (w.done) continue;
    const char state = process_state(w.pid);
    if (state == 'Z') continue;  // exited, not yet reaped
    out += (out.empty() ? "" : ", ") + std::to_string(w.rank) +
           (state == 'T' || state == 't' ? " (stopped)" : "");
  }
  return out;
}

// Exit statuses that say a restart would fail the same way: 2 is a usage error, 3 a config
// error (`mintrain train` exits 3 when the config, the topology or the data cannot run).
bool is_permanent_failure(int status) {
  return WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == core::kConfigErrorExit);
}

// The signals that ask a job to stop (with a checkpoint). A worker that was sent one itself (by
// a scheduler, an admin, a dropped ssh session) exits 128 + it, and the other ranks stop with it
// (exiting 143): the job was stopped, not failed, and is not restarted.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The stop signal a worker's status reports (it exited 128 + it, or died of it), or 0.
int stop_signal_of(int status) {
  for (const int sig : kStopSignals) {
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig) || (WIFSIGNALED(status) && WTERMSIG(status) == sig)) {
      return sig;
    }
  }
  return 0;
}

GroupOutcome run_group(const LaunchOptions& o, const std::string& program, int port,
                       const std::string& token, int restart) {
  const int workers_in_job = o.nnodes * o.nproc_per_node;
  const int world = workers_in_job + o.nservers;
  std::vector<Worker> workers;
  OutputPump pump;
  const pid_t launcher = ::getpid();
  pid_t group = 0;  // the workers' process group: the first worker's pid
  const int worker_threads = core::default_threads(core::usable_cores(), o.nproc_per_node);
  // Parameter servers are the last ranks of the world (dist/comm/rendezvous.h); node 0 starts them.
  auto spawn = [&](int rank, int local, int local_world, const std::string& label, bool server) {
    int out[2], err[2];
    MT_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    MT_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
    if (pid == 0) {
      // Die with the launcher, however it ends (even SIGKILL, which it cannot forward):
      // headless workers would train on and race a restarted launcher for the run folder.
      // SIGKILL rather than SIGTERM: a worker stuck in a collective would never act on SIGTERM,
      // and an orderly stop always comes through the launcher (which forwards SIGTERM first).
      // The signal follows the forking thread, which here runs the whole job (run_launch).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(128 + SIGKILL);  // it died before prctl took effect
      // One process group for all workers, apart from the terminal's: Ctrl-C reaches launch
      // only (launch forwards it once), and launch signals the group, so whatever a worker
      // started itself is stopped with it.
      ::setpgid(0, group);
      for (const int sig : kStopSignals) ::signal(sig, SIG_DFL);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(local_world).c_str(), 1);
      ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("MINTRAIN_RESTART_COUNT", std::to_string(restart).c_str(), 1);
      if (o.nservers > 0) {
        ::setenv("MINTRAIN_NUM_SERVERS", std::to_string(o.nservers).c_str(), 1);
        ::setenv("MINTRAIN_ROLE", server ? "server" : "worker", 1);
      }
      if (!token.empty()) ::setenv("MINTRAIN_JOB_TOKEN", token.c_str(), 1);
      // N workers share the cores this launch may use (its affinity and cgroup quota): split
      // them unless the user chose (as torchrun). A server only sums, on one thread.
      if (std::getenv("OMP_NUM_THREADS") == nullptr) {
        const int threads = server ? 1 : worker_threads;
        ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
      }
      std::vector<char*> args = {const_cast<char*>("mintrain")};
      for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(program.c_str(), args.data());
      const std::string msg = "mintrain launch: cannot run " + program + ": " + std::strerror(errno) + "\n";
      [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also here, so the group exists before we first signal it
    ::close(out[1]);
    ::close(err[1]);
    pump.add(out[0], label, false);
    pump.add(err[0], label, true);
    workers.push_back({rank, pid, 0, false, label});
  };
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    spawn(rank, local, o.nproc_per_node, "rank " + std::to_string(rank), false);
  }
  for (int s = 0; s < o.nservers && o.node_rank == 0; ++s) {
    const int rank = workers_in_job + s;
    spawn(rank, s, o.nservers, "server " + std::to_string(s), true);
  }
  pump.start();

  GroupOutcome outcome;
  int alive = static_cast<int>(workers.size());
  Clock::time_point kill_at{};
  bool killed = false;
  auto signal_all = [&](int sig) {
    if (alive > 0) ::kill(-group, sig);
  };
  auto kill_after = [&](double seconds) {
    const auto at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    if (kill_at == Clock::time_point{} || at < kill_at) kill_at = at;
  };
  while (alive > 0) {
    // Every signal is forwarded, so a second Ctrl-C reaches the workers as a second one too
    // (they then quit at once). A hang-up goes on as SIGTERM: the stop request that every
    // process of the job handles (parameter servers ignore it and end when the workers do).
    if (const int sig = g_signal.exchange(0); sig != 0) {
      if (outcome.interrupt == 0) outcome.interrupt = sig;
      signal_all(sig == SIGHUP ? SIGTERM : sig);
      kill_after(o.stop_timeout_seconds);  // time to finish the iteration and checkpoint
    }
    for (auto& w : workers) {
      if (w.done) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.done = true;
      w.status = status;
      --alive;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (const int sig = stop_signal_of(status); sig != 0 && outcome.failed_rank < 0 && outcome.interrupt == 0) {
        // A worker was asked to stop: the others stop with it (their stop vote), checkpoint
        // and exit; only stragglers are killed.
        outcome.interrupt = sig;
        outcome.stopped_by = w.label;
        kill_after(o.stop_timeout_seconds);
        continue;
      }
      // After a stop request the workers exit 128 + signal on purpose: not a failure.
      if (!ok && outcome.failed_rank < 0 && outcome.interrupt == 0) {
        outcome.failed_rank = w.rank;
        outcome.failed_label = w.label.rfind("server", 0) == 0 ? w.label + " (rank " + std::to_string(w.rank) + ")" : w.label;
        outcome.failed_status = status;
        outcome.running_at_failure = running_workers(workers);
        signal_all(SIGTERM);
        kill_after(o.grace_seconds);
      }
    }
    if (alive > 0 && kill_at != Clock::time_point{} && Clock::now() >= kill_at && !killed) {
      signal_all(SIGKILL);
      killed = true;
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pump.join();
  return outcome;
}

}  // namespace

LaunchOptions parse_launch_args(const std::vector<std::string>& argv) {
  LaunchOptions o;
  bool port_given = false;
  Flags f("launch", argv);
  while (f.next()) {
    const std::string& a = f.arg();
    // torchrun's habits: `--nproc_per_node` as well as `--nproc-per-node` (the underscore
    // spelling of every option); Flags takes `--flag=value` as well as `--flag value`.
    std::string name = a;
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "--nproc-per-node") o.nproc_per_node = to_int(a, f.value());
    else if (name == "--nnodes") o.nnodes = to_int(a, f.value());
    else if (name == "--node-rank") o.node_rank = to_int(a, f.value());
    else if (name == "--master-addr") o.master_addr = f.value();
    else if (name == "--master-port") o.master_port = to_int(a, f.value()), port_given = true;
    else if (name == "--grace") o.grace_seconds = to_int(a, f.value());
    else if (name == "--stop-timeout") o.stop_timeout_seconds = to_int(a, f.value());
    else if (name == "--max-restarts") o.max_restarts = to_int(a, f.value());
    else if (name == "--nservers") o.nservers = to_int(a, f.value());
    else f.fail("unknown option \"" + a + "\" (the worker's command goes after --)");
  }
  o.command = f.rest();
  auto check = [&](bool ok, const std::string& message) {
    if (!ok) f.fail(message);  // "launch: <message>"
  };
  check(!o.command.empty(), "no command: put the worker's arguments after --, e.g. "
        "mintrain launch --nproc-per-node 2 -- train CONFIG");
  check(o.nproc_per_node >= 1, "--nproc-per-node must be at least 1");
  check(o.nnodes >= 1, "--nnodes must be at least 1");
  check(o.node_rank < o.nnodes, core::formatted("--node-rank %d must be below --nnodes %d", o.node_rank, o.nnodes));
  check(!port_given || (o.master_port >= 1 && o.master_port <= 65535), "--master-port must be 1..65535");
  if (o.nnodes > 1 && !port_given) o.master_port = 29500;
  return o;
}

int run_launch(const LaunchOptions& o, const std::string& program) {
  // A single-node job gets its own token, so a stray process on the port cannot join it.
  std::string token = std::getenv("MINTRAIN_JOB_TOKEN") ? std::getenv("MINTRAIN_JOB_TOKEN") : "";
  if (token.empty() && o.nnodes == 1) token = random_token();

  struct sigaction sa {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  // SIGHUP too: a dropped ssh session is a request to stop, and the workers checkpoint first.
  for (const int sig : kStopSignals) sigaction(sig, &sa, nullptr);

  for (int restart = 0;; ++restart) {
    // A picked port is picked again for each start: the old one may still be in TIME_WAIT or,
    // worse, held by a worker that has not died yet. A given port is reused (the store sets
    // SO_REUSEADDR, and every node's launcher must agree on it).
    const int port = o.master_port != 0 ? o.master_port : dist::net::pick_free_port();
    const GroupOutcome g = run_group(o, program, port, token, restart);
    int interrupt = g.interrupt;
    if (interrupt == 0) interrupt = g_signal.exchange(0);  // arrived after the last worker ended
    if (interrupt != 0 && !g.stopped_by.empty()) {
      std::fprintf(stderr, "mintrain launch: a stop request (%s) reached the workers, not launch (%s stopped "
                   "first): the job stopped, no restart\n", ::strsignal(interrupt), g.stopped_by.c_str());
      return 128 + interrupt;
    }
    if (interrupt != 0) {
      std::fprintf(stderr, "mintrain launch: interrupted (%s): forwarded to the workers, no restart\n",
                   ::strsignal(interrupt));
      return 128 + interrupt;
    }
    if (g.failed_rank < 0) return 0;
    const std::string why = g.failed_label + " exited with " +
                            describe_status(g.failed_status);
    // A rank that fails while others still run may have been waiting for them (a collective
    // timed out): name them, so a hung or stopped rank is not hidden behind the healthy one.
    if (!g.running_at_failure.empty() && !is_permanent_failure(g.failed_status)) {
      std::fprintf(stderr, "mintrain launch: rank(s) %s still ran when rank %d failed; if its error "
                   "is a timeout, they are the ones it waited for\n",
                   g.running_at_failure.c_str(), g.failed_rank);
    }
    if (is_permanent_failure(g.failed_status)) {
      const int left = o.max_restarts - restart;
      const std::string skipped =
          left > 0 ? ", so the " + std::to_string(left) + " restart(s) left were skipped" : "";
      std::fprintf(stderr, "mintrain launch: %s: a permanent error (a usage or config error, which "
                   "a restart cannot fix)%s; stopped the other workers\n", why.c_str(),
                   skipped.c_str());
      return WEXITSTATUS(g.failed_status);  // permanent for whoever runs launch, too
    }
    if (restart < o.max_restarts) {
      std::fprintf(stderr, "mintrain launch: restart %d/%d after %s\n", restart + 1,
                   o.max_restarts, why.c_str());
      continue;
    }
    const std::string used =
        o.max_restarts > 0 ? " (all " + std::to_string(o.max_restarts) + " restarts used)" : "";
    std::fprintf(stderr, "mintrain launch: %s; stopped the other workers%s\n", why.c_str(),
                 used.c_str());
    return 1;
  }
}

}  // namespace mt::apps
