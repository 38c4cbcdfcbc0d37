// The `mintrain` command.
//
//   mintrain train CONFIG [--set k=v ...] [--resume PATH] [--output DIR]
//   mintrain eval CONFIG --checkpoint PATH [--set k=v ...]
//   mintrain launch --nproc-per-node N [...] -- train CONFIG ...
//   mintrain help | version
//
// Every user error ends as "mintrain: error: <message>" on stderr and exit status 1; bad
// arguments print the usage and exit 2; an interrupted run (Ctrl-C, SIGTERM) saves a checkpoint
// and exits 128 + the signal (130, 143).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/launch.h"
#include "apps/model_command.h"
#include "apps/plot_command.h"
#include "apps/profile_comm_command.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/serialize.h"
#include "data/registry.h"
#include "layers/models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/registry.h"

namespace {

using mt::apps::RunConfig;

constexpr const char* kVersion = "0.1.0";

const char* kUsage =
    "usage: mintrain <command> [args]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set k=v ...] [--resume PATH|auto] [--output DIR]\n"
    "                     train a model; --resume continues from a checkpoint file or folder;\n"
    "                     --resume auto: from the newest intact checkpoint of this run's\n"
    "                     checkpoint folder if there is one, else from the start\n"
    "  eval CONFIG --checkpoint PATH [--set k=v ...]\n"
    "                     test accuracy and loss of a checkpoint\n"
    "  launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]\n"
    "         [--max-restarts R] [--grace S] [--stop-timeout S] -- COMMAND ...\n"
    "                     run N workers of `mintrain COMMAND ...` here (e.g. -- train CONFIG), each\n"
    "                     with RANK/WORLD_SIZE/MASTER_ADDR/...; output lines start with [rank R];\n"
    "                     when a worker fails, stop all and start the group again, up to R times\n"
    "                     (a restarted `train` resumes from its newest checkpoint); --grace: how\n"
    "                     long failed groups get before SIGKILL (5 s), --stop-timeout: how long\n"
    "                     workers get to checkpoint after Ctrl-C/SIGTERM to launch (60 s)\n"
    "  model CONFIG [--set k=v ...] [--workers 1,2,...,1024] [--bandwidth-gbps X --latency-us Y]\n"
    "        [--ranks-per-rack R --inter-bandwidth-gbps X] [--layer-times F.json] [--save-profile F.json]\n"
    "        [--comm-profile F.json]\n"
    "                     profile CONFIG's model here and predict the iteration time and scaling\n"
    "                     of BSP, WFBP, FUSION, MGWFBP, CD-SGD and DS-Sync for N workers on the\n"
    "                     network of dist.network (or the flags), with each DAG's critical path\n"
    "                     (`mintrain model --help` lists every option)\n"
    "  profile-comm [--out F.json] [--sizes 256,...] [--no-gamma] [--interface IF]\n"
    "                     run as workers (launch --nproc-per-node N -- profile-comm ...): measure\n"
    "                     allreduce alpha/beta and gamma, for `model CONFIG --comm-profile F.json`\n"
    "  plot RUN_DIR... [--out DIR]\n"
    "                     PNG curves (loss, accuracy, learning rate, throughput against iterations\n"
    "                     and time) of each run's metrics.jsonl, runs overlaid; needs gnuplot\n"
    "  help               this text, with the models, optimizers, schedules and datasets\n"
    "  version            the version\n"
    "\n"
    "--set path.to.field=value overrides one config field (see configs/mintrain.proto), e.g.\n"
    "  --set epochs=1 --set optimizer.lr=0.02 --set lr_schedule.milestones=[80,120]\n"
    "\n"
    "Ctrl-C or SIGTERM (e.g. Slurm preemption): training stops after the current iteration, saves\n"
    "a checkpoint and exits 130 (SIGINT) or 143 (SIGTERM); all ranks of a distributed run stop\n"
    "together. The same signal again, later than half a second after the first, quits at once\n"
    "without a checkpoint. To continue: the same command with --resume auto.\n"
    "Under `launch`, workers see MINTRAIN_RESTART_COUNT (0 on the first start); when it is above\n"
    "0, `train` without --resume behaves as --resume auto.\n";

// Thrown for malformed command lines: main prints the usage after the message.
struct UsageError : mt::core::Error {
  using mt::core::Error::Error;
};

// Stopping on a signal. The first SIGINT or SIGTERM sets g_stop: the trainer finishes the
// iteration, saves a checkpoint and returns, and every rank stops at the same iteration. The
// same request again quits at once with 128 + signal. Repeats within kRepeatWindowNs of the
// first are the same request, not a second one: a batch scheduler (Slurm) signals every process
// of a job step, and `mintrain launch` forwards the signal it got a few milliseconds later, so a
// worker may receive it twice without anyone asking twice.
// Only async-signal-safe work in the handler: lock-free atomics, clock_gettime, write, _exit.
constexpr int64_t kRepeatWindowNs = 500'000'000;
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_first_signal_ns{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<int64_t>::is_always_lock_free);

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void write_stderr(const char* text) {
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
}

extern "C" void on_stop_signal(int sig) {
  const int saved_errno = errno;
  const int64_t now = std::max<int64_t>(1, monotonic_ns());
  int64_t first = 0;
  if (g_first_signal_ns.compare_exchange_strong(first, now)) {
    g_stop_signal.store(sig);
    g_stop.store(true);
    write_stderr(sig == SIGTERM
                     ? "mintrain: SIGTERM: stopping after this iteration to save a checkpoint\n"
                     : "mintrain: interrupted: stopping after this iteration to save a checkpoint "
                       "(Ctrl-C again to quit at once)\n");
  } else if (now - first > kRepeatWindowNs) {
    write_stderr("mintrain: quitting at once, without a checkpoint\n");
    ::_exit(128 + sig);
  }
  errno = saved_errno;
}

void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The restart number `mintrain launch --max-restarts` gives its workers; 0 outside launch.
int restart_count() {
  const char* v = std::getenv("MINTRAIN_RESTART_COUNT");
  return v != nullptr ? std::atoi(v) : 0;
}

// --resume auto: the newest checkpoint in the run's checkpoint folder that reads back intact,
// or "" when there is none (a fresh run). A damaged newest file (the disk filled up, a copy
// was cut short) falls back to the one before it; if every file is damaged that is an error,
// since silently starting over would throw the run's progress away.
std::string newest_intact_checkpoint(const std::string& dir, bool chatty) {
  if (dir.empty()) {
    if (chatty) std::cout << "note: checkpoints are off (checkpoint.dir is empty); starting from scratch\n";
    return "";
  }
  const std::vector<std::string> files = mt::apps::CheckpointDir::list(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      (void)mt::core::load_archive(*it);
      return *it;
    } catch (const mt::core::Error& e) {
      if (chatty) std::cerr << "mintrain: warning: skipping damaged checkpoint: " << e.what() << std::endl;
    }
  }
  MT_CHECK(files.empty(), "--resume auto: every checkpoint in \"", dir, "\" is damaged (see the ",
           "warnings above); remove them to start over, or pass --resume FILE");
  if (chatty) std::cout << "no checkpoint in " << dir << " yet; starting from scratch" << std::endl;
  return "";
}

// Arguments after the subcommand: one positional CONFIG and the options in `allowed`
// (each takes a value; --set may repeat).
struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::map<std::string, std::string> options;
};

Args parse_args(const std::string& command, const std::vector<std::string>& argv,
                const std::vector<std::string>& allowed) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      std::string value;
      bool has_value = false;
      if (const auto eq = arg.find('='); eq != std::string::npos) {  // --opt=value form
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
      if (arg == "--set" || std::find(allowed.begin(), allowed.end(), arg) != allowed.end()) {
        if (!has_value) {
          if (i + 1 >= argv.size()) throw UsageError(command + ": " + arg + " needs a value");
          value = argv[++i];
        }
        if (arg == "--set") a.sets.push_back(value);
        else a.options[arg] = value;
        continue;
      }
      throw UsageError(command + ": unknown option \"" + arg + "\"");
    }
    if (!a.config.empty()) {
      throw UsageError(command + ": unexpected argument \"" + arg + "\" (CONFIG is already \"" +
                       a.config + "\")");
    }
    a.config = arg;
  }
  if (a.config.empty()) throw UsageError(command + ": missing CONFIG (a .prototxt file)");
  return a;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

int cmd_train(const std::vector<std::string>& argv) {
  const Args a = parse_args("train", argv, {"--resume", "--output"});
  RunConfig config = mt::apps::load_config(a.config);
  for (const auto& s : a.sets) mt::apps::apply_override(config, s);
  if (auto it = a.options.find("--output"); it != a.options.end()) config.set_output_dir(it->second);
  mt::apps::validate_config(config);

  install_stop_handler();
  mt::apps::TrainerOptions opt;
  opt.stop_flag = &g_stop;
  mt::apps::Trainer trainer(config, opt);
  std::string resume = a.options.count("--resume") ? a.options.at("--resume") : "";
  // A worker the launcher restarted continues where the group's checkpoints left off.
  if (resume.empty() && restart_count() > 0) resume = "auto";
  if (resume == "auto") {
    const std::string& dir = config.checkpoint().dir();
    const bool relative = !dir.empty() && dir.front() != '/';
    resume = newest_intact_checkpoint(relative ? trainer.output_dir() + "/" + dir : dir,
                                      trainer.rank() == 0);
  }
  if (!resume.empty()) trainer.resume(resume);
  const mt::apps::TrainResult r = trainer.train();
  if (r.interrupted) {
    if (trainer.rank() == 0) {
      std::cerr << "mintrain: interrupted";
      if (!r.last_checkpoint.empty()) {
        std::cerr << "; checkpoint " << r.last_checkpoint
                  << "; to continue, run the same command with --resume auto";
      }
      std::cerr << std::endl;
    }
    // The ranks a signal did not reach stopped because another rank asked to.
    const int sig = g_stop_signal.load();
    return 128 + (sig != 0 ? sig : SIGINT);
  }
  if (trainer.rank() != 0) return 0;  // rank 0 speaks for the job
  std::cout << "done: " << r.iterations << " iterations in " << static_cast<long long>(r.seconds)
            << " s";
  if (r.last_eval.examples > 0) {
    std::printf(", test acc %.2f%% (best %.2f%%)", r.last_eval.accuracy, r.best_accuracy);
    std::fflush(stdout);
  }
  std::cout << ", output in " << trainer.output_dir() << std::endl;
  return 0;
}

int cmd_eval(const std::vector<std::string>& argv) {
  const Args a = parse_args("eval", argv, {"--checkpoint"});
  const auto it = a.options.find("--checkpoint");
  if (it == a.options.end()) throw UsageError("eval: missing --checkpoint PATH");
  const RunConfig config = mt::apps::load_run_config(a.config, a.sets);
  mt::apps::TrainerOptions opt;
  opt.eval_only = true;
  mt::apps::Trainer trainer(config, opt);
  trainer.load_weights(it->second);
  const mt::apps::EvalResult r = trainer.evaluate();
  std::printf("test loss %.4f acc %.2f%% (%lld images, %.1f s)\n", r.loss, r.accuracy,
              static_cast<long long>(r.examples), r.seconds);
  return 0;
}

int cmd_launch(const std::vector<std::string>& argv) {
  mt::apps::LaunchOptions options;
  try {
    options = mt::apps::parse_launch_args(argv);
  } catch (const mt::core::Error& e) {
    throw UsageError(e.what());
  }
  return mt::apps::run_launch(options, "/proc/self/exe");
}

int cmd_model(const std::vector<std::string>& argv) { return mt::apps::run_model_command(argv, std::cout); }
int cmd_profile_comm(const std::vector<std::string>& argv) {
  return mt::apps::run_profile_comm_command(argv, std::cout);
}

int cmd_help(const std::vector<std::string>&) {
  std::cout << kUsage << "\n"
            << "models:        " << join(mt::layers::model_names()) << "\n"
            << "optimizers:    " << join(mt::optim::optimizer_names()) << "\n"
            << "lr schedules:  " << join(mt::optim::lr_schedule_types()) << "\n"
            << "datasets:      " << join(mt::apps::data_types()) << "\n";
  return 0;
}

int cmd_version(const std::vector<std::string>&) {
  std::cout << "mintrain " << kVersion << "\n";
  return 0;
}

// The subcommands. New ones (launch, bench, model ...) are one function and one line here.
const std::map<std::string, std::function<int(const std::vector<std::string>&)>>& commands() {
  static const std::map<std::string, std::function<int(const std::vector<std::string>&)>> table = {
      {"train", cmd_train},
      {"eval", cmd_eval},
      {"launch", cmd_launch},
      {"model", cmd_model},
      {"profile-comm", cmd_profile_comm},
      {"plot", [](const std::vector<std::string>& a) { return mt::apps::run_plot_command(a, std::cout); }},
      {"help", cmd_help},
      {"version", cmd_version},
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::string command = args[0];
  if (command == "--help" || command == "-h") command = "help";
  if (command == "--version") command = "version";
  args.erase(args.begin());
  try {
    const auto it = commands().find(command);
    if (it == commands().end()) throw UsageError("unknown command \"" + command + "\"");
    return it->second(args);
  } catch (const UsageError& e) {
    std::cerr << "mintrain: error: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const mt::core::Error& e) {
    std::cerr << "mintrain: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mintrain: error: " << e.what() << std::endl;
    return 1;
  }
}
