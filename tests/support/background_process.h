// A program started in the background, as a user or a scheduler starts one, for the tests that
// signal, kill or wait for real processes (test_reliability, test_launch_scripts).
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace mt::testing {

// argv[0] (found on PATH) runs in `dir`, its output in dir/stdout and dir/stderr, with `env`
// (NAME=VALUE) set besides, one OpenMP thread, and no MINTRAIN_RESTART_COUNT (in case ctest itself
// runs under launch). Killed if it still runs when this goes out of scope.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::filesystem::path& dir, std::vector<std::string> argv,
                    std::vector<std::string> env = {})
      : dir_(dir) {
    pid_ = ::fork();
    if (pid_ != 0) return;
    for (auto& e : env) ::putenv(e.data());
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ::unsetenv("MINTRAIN_RESTART_COUNT");
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    if (!std::freopen("stdout", "w", stdout) || !std::freopen("stderr", "w", stderr)) ::_exit(126);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ~BackgroundProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return read("stdout"); }
  std::string err() const { return read("stderr"); }
  void signal(int sig) const { ::kill(pid_, sig); }

  // Polls `ready` until it holds (true) or `seconds` pass or the process exits (false).
  template <typename F>
  bool wait_until(F ready, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready()) return true;
      if (exited()) return ready();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The exit status, or -1000 - signal when killed by one, or -1 on timeout (then killed).
  int wait_exit(double seconds) {
    wait_until([] { return false; }, seconds);
    if (!exited()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      return -1;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1000 - WTERMSIG(status_);
  }
  bool exited() {
    if (!reaped_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }

 private:
  std::string read(const char* name) const {
    std::ifstream in(dir_ / name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace mt::testing
