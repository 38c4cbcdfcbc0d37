#include "support/multiprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "dist/comm/socket.h"
#include "dist/comm/tcp_store.h"

namespace mt::testing {

namespace {

using Clock = std::chrono::steady_clock;

// Collects the child's gtest failures so the parent can print them.
class FailureCollector : public ::testing::EmptyTestEventListener {
 public:
  explicit FailureCollector(std::string* out) : out_(out) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    *out_ += std::string(r.file_name() ? r.file_name() : "?") + ":" + std::to_string(r.line_number()) +
             ": " + r.summary() + "\n";
  }

 private:
  std::string* out_;
};

// Where each rank leaves its pid, so that rank 0 can tell a rank that has exited from one that
// still uses the store.
std::string pid_key(int rank) { return "multiprocess/pid/" + std::to_string(rank); }

// Whether rank r's process still runs (or has not said its pid yet). The parent reaps exited
// ranks every few milliseconds, so an exited rank is not a zombie for long.
bool is_running(dist::Store& store, int r) {
  if (!store.check({pid_key(r)})) return true;
  const std::vector<uint8_t> pid = store.get(pid_key(r));
  return ::kill(static_cast<pid_t>(std::stol(std::string(pid.begin(), pid.end()))), 0) == 0;
}

[[noreturn]] void child_main(int rank, int n, int port, const RankFn& fn, const MultiprocessOptions& opt,
                             int report_fd) {
  std::string failures;
  ::testing::UnitTest::GetInstance()->listeners().Append(new FailureCollector(&failures));
  std::string exception;
  try {
    RankContext c;
    c.rank = rank;
    c.size = n;
    c.port = port;
    std::shared_ptr<dist::TCPStore> store;
    if (opt.create_store) {
      dist::TCPStoreOptions so;
      so.host = "127.0.0.1";
      so.port = port;
      so.is_server = rank == 0;
      so.timeout = opt.group.timeout;
      so.rank = rank;
      store = std::make_shared<dist::TCPStore>(so);
      c.store = store;
      const std::string pid = std::to_string(::getpid());
      store->set(pid_key(rank), std::vector<uint8_t>(pid.begin(), pid.end()));
      if (opt.create_group) {
        dist::ProcessGroupOptions go = opt.group;
        if (go.hostname.empty() && go.interface.empty()) go.hostname = "127.0.0.1";
        c.group = dist::create_process_group(store, rank, n, go);
      }
    }
    fn(c);
    // Rank 0 hosts the store: it must outlive every other rank's use of it.
    if (store) {
      store->set("multiprocess/done/" + std::to_string(rank), {1});
      if (rank == 0) {
        // Each rank until it says done or is gone: a slower survivor must not find the store
        // gone ("connection closed by peer" under a loaded CI), and a rank that exits on purpose
        // or is killed never says done. One that hangs is killed at the overall timeout.
        for (int r = 1; r < n; ++r) {
          try {
            while (!store->check({"multiprocess/done/" + std::to_string(r)}) && is_running(*store, r))
              std::this_thread::sleep_for(std::chrono::milliseconds(2));
          } catch (const std::exception&) {
          }
        }
      }
    }
  } catch (const std::exception& e) {
    exception = std::string("uncaught exception: ") + e.what() + "\n";
  } catch (...) {
    exception = "uncaught non-standard exception\n";
  }
  const std::string report = failures + exception;
  const bool failed = !report.empty() || ::testing::Test::HasFailure();
  if (!report.empty()) {
    size_t off = 0;
    while (off < report.size()) {
      const ssize_t w = ::write(report_fd, report.data() + off, report.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  // _exit: no static destructors, no gtest teardown, no atexit handlers of the parent's state.
  ::_exit(failed ? 1 : 0);
}

std::string describe(const RankResult& r) {
  std::string s = "rank " + std::to_string(r.rank) + ": ";
  if (r.killed) s += "killed after the overall timeout (hung?)";
  else if (r.signal != 0) s += std::string("died of signal ") + std::to_string(r.signal) + " (" + ::strsignal(r.signal) + ")";
  else s += "exited with status " + std::to_string(r.exit_code);
  if (!r.message.empty()) s += "\n" + r.message;
  return s;
}

}  // namespace

int free_port() { return dist::net::pick_free_port(); }

bool MultiprocessResult::ok() const {
  for (const auto& r : ranks) {
    if (!r.ok()) return false;
  }
  return !ranks.empty();
}

std::string MultiprocessResult::report() const {
  std::string out;
  for (const auto& r : ranks) {
    if (!r.ok()) out += describe(r) + "\n";
  }
  return out;
}

::testing::AssertionResult MultiprocessResult::ok_or_report() const {
  if (ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "some ranks failed:\n" << report();
}

MultiprocessResult run_ranks(int n, const RankFn& fn, MultiprocessOptions options) {
  const int port = free_port();
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> fds(static_cast<size_t>(n), -1);
  MultiprocessResult result;
  result.ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      result.ranks[static_cast<size_t>(r)].message = "pipe failed";
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      child_main(r, n, port, fn, options, p[1]);
    }
    ::close(p[1]);
    pids[static_cast<size_t>(r)] = pid;
    fds[static_cast<size_t>(r)] = p[0];
    result.ranks[static_cast<size_t>(r)].rank = r;
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  }
  const auto deadline = Clock::now() + options.timeout;
  int running = 0;
  for (const pid_t p : pids) running += p > 0;
  auto drain = [&](int r) {
    char buf[4096];
    while (fds[static_cast<size_t>(r)] >= 0) {
      const ssize_t got = ::read(fds[static_cast<size_t>(r)], buf, sizeof(buf));
      if (got <= 0) break;
      result.ranks[static_cast<size_t>(r)].message.append(buf, static_cast<size_t>(got));
    }
  };
  while (running > 0) {
    for (int r = 0; r < n; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid <= 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        auto& rr = result.ranks[static_cast<size_t>(r)];
        if (WIFEXITED(status)) rr.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) rr.signal = WTERMSIG(status);
        drain(r);
        pid = -1;
        --running;
      } else {
        drain(r);
      }
    }
    if (running == 0) break;
    if (Clock::now() >= deadline) {
      for (int r = 0; r < n; ++r) {
        pid_t& pid = pids[static_cast<size_t>(r)];
        if (pid <= 0) continue;
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        drain(r);
        result.ranks[static_cast<size_t>(r)].killed = true;
        pid = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int& fd : fds) dist::net::close_fd(fd);
  return result;
}

}  // namespace mt::testing
