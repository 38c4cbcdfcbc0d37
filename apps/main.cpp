// The `mintrain` command.
//
//   mintrain train CONFIG [--set k=v ...] [--resume PATH] [--weights CKPT] [--overwrite] [--output DIR]
//   mintrain eval CONFIG --checkpoint PATH [--set k=v ...]
//   mintrain launch --nproc-per-node N [...] -- train CONFIG ...
//   mintrain help | version
//
// Every error ends as "mintrain: error: <message>" on stderr; main() alone turns errors into
// exit statuses (exit_status below): 2 a malformed command line (one line, and where the usage
// is), 3 a core::ConfigError (the config, the job's topology, the data: a rerun cannot fix it),
// 1 any other error. A stopped run (Ctrl-C, SIGTERM, SIGHUP) saves a checkpoint and exits 128 +
// the signal (130, 143, 129).
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
#include "apps/config_choices.h"
#include "apps/flags.h"
#include "apps/launch.h"
#include "apps/model_command.h"
#include "apps/parameter_server_role.h"
#include "apps/plot_command.h"
#include "apps/profile_comm_command.h"
#include "apps/tokenize_command.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/serialize.h"
#include "core/strings.h"
#include "dist/auto/auto_synchronizer.h"
#include "dist/registry.h"

namespace {

using mt::apps::RunConfig;

constexpr const char* kVersion = "0.1.0";

// Each command's usage: `mintrain COMMAND --help` prints its own, `mintrain help` all of them.
const char* kTrainUsage =
    "  train CONFIG [--set k=v ...] [--resume PATH|auto] [--weights CKPT] [--overwrite] [--output DIR]\n"
    "                     train a model; --resume continues from a checkpoint file or folder;\n"
    "                     --resume auto: from the newest intact checkpoint of this run's\n"
    "                     checkpoint folder if there is one, else from the start (a run found\n"
    "                     there without a checkpoint is moved aside and started over); --weights: a\n"
    "                     fresh run starting from a checkpoint's weights where names and shapes\n"
    "                     match (fine-tuning); a folder that holds another run is refused unless\n"
    "                     --resume or --overwrite (which moves the old run aside, deleting nothing)\n";
const char* kSurveyUsage =
    "  survey CONFIG [--set k=v ...] [--iters N] [--output DIR]\n"
    "                     (under launch) time every lossless synchronization this job can run\n"
    "                     (dist.algorithm \"auto\"'s candidates) for N iterations each (20) and\n"
    "                     print them measured next to predicted, the fastest marked (with\n"
    "                     launch --nservers S, the parameter server's schedules too)\n";
const char* kEvalUsage =
    "  eval CONFIG --checkpoint PATH [--set k=v ...]\n"
    "                     test accuracy and loss of a checkpoint\n";
const char* kLaunchUsage =
    "  launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]\n"
    "         [--max-restarts R] [--grace S] [--stop-timeout S] [--nservers S] -- COMMAND ...\n"
    "                     run N workers of `mintrain COMMAND ...` here (e.g. -- train CONFIG), each\n"
    "                     with RANK/WORLD_SIZE/MASTER_ADDR/...; output lines start with [rank R];\n"
    "                     when a worker fails, stop all and start the group again, up to R times\n"
    "                     (a restarted `train` resumes from its newest checkpoint; a config error\n"
    "                     is not retried); --grace: how long failed groups get before SIGKILL (5 s),\n"
    "                     --stop-timeout: how long workers get to checkpoint after Ctrl-C/SIGTERM\n"
    "                     to launch (60 s); --nservers: S parameter servers beside the workers\n"
    "                     (dist.algorithm \"ps\"; ranks after the workers, lines start [server s]);\n"
    "                     --opt=value and torchrun's --nproc_per_node work too\n";
const char* kModelUsage =
    "  model CONFIG [--set k=v ...] [--workers 1,2,...,1024] [--bandwidth-gbps X --latency-us Y]\n"
    "        [--ranks-per-rack R --inter-bandwidth-gbps X] [--layer-times F.json] [--save-profile F.json]\n"
    "        [--comm-profile F.json]\n"
    "                     profile CONFIG's model here and predict the iteration time and scaling\n"
    "                     of bsp, wfbp, fusion, mgwfbp, CD-SGD and DS-Sync for N workers on the\n"
    "                     network of dist.network (or the flags), with each DAG's critical path\n"
    "                     (`mintrain model --help` lists every option)\n";
const char* kProfileCommUsage =
    "  profile-comm [--out F.json] [--sizes 256,...] [--no-gamma] [--interface IF]\n"
    "                     run as workers (launch --nproc-per-node N -- profile-comm ...): measure\n"
    "                     allreduce alpha/beta and gamma, for `model CONFIG --comm-profile F.json`\n";
const char* kTokenizeSummary =
    "  tokenize --vocab vocab.txt [--cased | --uncased]\n"
    "                     BERT token ids and pieces of each line of standard input\n";
const char* kPlotSummary =
    "  plot RUN_DIR... [--out DIR]\n"
    "                     PNG curves (loss, accuracy, learning rate, throughput against iterations\n"
    "                     and time) of each run's metrics.jsonl, runs overlaid; needs gnuplot\n";
const char* kTail =
    "\n"
    "--set path.to.field=value overrides one config field (see configs/mintrain.proto), e.g.\n"
    "  --set epochs=1 --set optimizer.lr=0.02 --set lr_schedule.milestones=[80,120]\n"
    "Every --option takes its value as the next argument or as --option=value.\n"
    "\n"
    "Exit status: 0 done; 1 an error; 2 a malformed command line; 3 an error that running again\n"
    "unchanged cannot fix: in the config or the command line's values, the job's ranks and\n"
    "servers, the data, or the output folder (`launch` does not restart it, and exits with it);\n"
    "128 + signal after Ctrl-C (130), SIGTERM (143) or SIGHUP (129).\n"
    "Ctrl-C, SIGTERM (e.g. Slurm preemption) or SIGHUP (a dropped ssh session): training stops\n"
    "after the current iteration, saves a checkpoint and exits 128 + the signal; all ranks of a\n"
    "distributed run stop together (a rank stopped by another's request exits 143), and `launch`\n"
    "restarts nothing. The same signal again, later than half a second after the first, quits at\n"
    "once without a checkpoint. To continue: the same command with --resume auto.\n"
    "Under `launch`, workers see MINTRAIN_RESTART_COUNT (0 on the first start); when it is above\n"
    "0, `train` without --resume behaves as --resume auto.\n";

std::string usage() {
  return std::string("usage: mintrain <command> [args]\n\ncommands:\n") + kTrainUsage + kEvalUsage + kSurveyUsage +
         kLaunchUsage + kModelUsage + kProfileCommUsage + kTokenizeSummary + kPlotSummary +
         "  help               this text, with the models, optimizers, schedules, datasets and\n"
         "                     distributed algorithms\n"
         "  version            the version\n" +
         kTail;
}

// Thrown for malformed command lines (also by the flag parser of every subcommand,
// apps/flags.h): main prints the message and where the usage is, and exits 2.
using UsageError = mt::apps::FlagError;

// Stopping on a signal. The first SIGINT, SIGTERM or SIGHUP sets g_stop: the trainer finishes the
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
    write_stderr(sig == SIGTERM  ? "mintrain: SIGTERM: stopping after this iteration to save a checkpoint\n"
                 : sig == SIGHUP ? "mintrain: SIGHUP (the terminal or ssh session hung up): stopping after this "
                                   "iteration to save a checkpoint\n"
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
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// Arguments after the subcommand: one positional CONFIG, the options in `allowed` (each takes
// a value; --set may repeat) and the switches in `flags` (no value: "" in `options`).
struct Args {
  std::string config;
  std::vector<std::string> sets;
  std::map<std::string, std::string> options;
};

Args parse_args(const std::string& command, const std::vector<std::string>& argv,
                const std::vector<std::string>& allowed, const std::vector<std::string>& flags = {}) {
  Args a;
  mt::apps::Flags f(command, argv);
  auto among = [&](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), f.arg()) != names.end();
  };
  while (f.next()) {
    if (f.is("--set")) {
      a.sets.push_back(f.value());
    } else if (among(allowed)) {
      a.options[f.arg()] = f.value();
    } else if (among(flags)) {
      f.no_value();
      a.options[f.arg()] = "";
    } else if (f.is_flag()) {
      f.unknown();
    } else if (!a.config.empty()) {
      f.fail("unexpected argument \"" + f.arg() + "\" (CONFIG is already \"" + a.config + "\")");
    } else {
      a.config = f.arg();
    }
  }
  if (!f.rest().empty() || (!argv.empty() && argv.back() == "--"))
    throw UsageError(command + ": unexpected \"--\" (only launch runs a command after it)");
  if (a.config.empty()) throw UsageError(command + ": missing CONFIG (a .prototxt file)");
  return a;
}

// The config a command runs: the file, each --set, normalized and validated. Anything wrong
// here is the user's to fix, and running again will not help: a ConfigError (exit 3).
RunConfig run_config(const Args& a) {
  try {
    return mt::apps::load_run_config(a.config, a.sets);
  } catch (const mt::core::Error& e) {
    throw mt::core::ConfigError(e.what());
  }
}

int cmd_train(const std::vector<std::string>& argv) {
  const Args a = parse_args("train", argv, {"--resume", "--output", "--weights"}, {"--overwrite"});
  RunConfig config = run_config(a);
  if (auto it = a.options.find("--output"); it != a.options.end()) config.set_output_dir(it->second);
  if (a.options.count("--weights") && a.options.count("--resume")) {
    throw UsageError("train: --weights starts a new run from a checkpoint's weights, --resume continues "
                     "one; give one of them");
  }

  // A parameter server's rank (MINTRAIN_NUM_SERVERS) serves partitions instead of training.
  if (const mt::dist::WorldInfo world = mt::dist::world_from_env(); world.servers > 0 && world.is_server())
    return mt::apps::run_parameter_server(config, world, std::cout);

  install_stop_handler();
  mt::apps::TrainerOptions opt;
  opt.stop_flag = &g_stop;
  opt.overwrite = a.options.count("--overwrite") > 0;
  mt::apps::Trainer trainer(config, opt);
  if (auto it = a.options.find("--weights"); it != a.options.end()) trainer.init_from_weights(it->second);
  std::string resume = a.options.count("--resume") ? a.options.at("--resume") : "";
  // A worker the launcher restarted (`launch --max-restarts`) continues where the group's
  // checkpoints left off.
  const char* restart = std::getenv("MINTRAIN_RESTART_COUNT");
  if (resume.empty() && restart != nullptr && std::atoi(restart) > 0) resume = "auto";
  if (resume == "auto") {
    trainer.resume_auto();
  } else if (!resume.empty()) {
    trainer.resume(resume);
  }
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
    // The ranks a signal did not reach stopped because another rank was asked to: SIGTERM's
    // status, a stop request's, so that `launch` restarts nothing.
    const int sig = g_stop_signal.load();
    return 128 + (sig != 0 ? sig : SIGTERM);
  }
  if (trainer.rank() != 0) return 0;  // rank 0 speaks for the job
  std::cout << "done: " << r.iterations << " iterations in " << static_cast<long long>(r.seconds) << " s"
            << (r.last_eval.examples > 0
                    ? mt::core::formatted(", test acc %.2f%% (best %.2f%%)", r.last_eval.accuracy, r.best_accuracy)
                    : "")
            << ", output in " << trainer.output_dir() << std::endl;
  return 0;
}

int cmd_eval(const std::vector<std::string>& argv) {
  const Args a = parse_args("eval", argv, {"--checkpoint"});
  const auto it = a.options.find("--checkpoint");
  if (it == a.options.end()) throw UsageError("eval: missing --checkpoint PATH");
  const RunConfig config = run_config(a);
  mt::apps::TrainerOptions opt;
  opt.eval_only = true;
  mt::apps::Trainer trainer(config, opt);
  const std::string file = mt::apps::resolve_checkpoint(it->second);
  trainer.load_weights(file);
  const mt::apps::TrainingState& s = trainer.state();
  const std::string where = s.next_batch == 0 ? "after epoch " + std::to_string(s.epoch)
                                             : "epoch " + std::to_string(s.epoch + 1) + " batch " +
                                                   std::to_string(s.next_batch);
  std::printf("checkpoint %s: iteration %lld, %s\n", file.c_str(), static_cast<long long>(s.global_iteration),
              where.c_str());
  const mt::apps::EvalResult r = trainer.evaluate();
  std::printf("test loss %.4f acc %.2f%% (%lld images, %.1f s)\n", r.loss, r.accuracy,
              static_cast<long long>(r.examples), r.seconds);
  return 0;
}

// The survey on the job's own machines: every candidate of dist.algorithm "auto" timed for
// --iters iterations, rank 0's log printing the table (predicted next to measured, the fastest
// marked). It is auto's start with every candidate tried, then the run ends.
int cmd_survey(const std::vector<std::string>& argv) {
  const Args a = parse_args("survey", argv, {"--iters", "--output"}, {});
  RunConfig config = run_config(a);
  const int iters = a.options.count("--iters") ? std::stoi(a.options.at("--iters")) : 20;
  if (iters < 1) throw UsageError("survey: --iters must be >= 1");
  mintrain::AutoConfig& s = *config.mutable_dist()->mutable_auto_();
  config.mutable_dist()->set_algorithm("auto");
  s.set_trials(0);
  s.set_trial_iters(iters);
  s.set_max_redecisions(0);
  const mt::dist::WorldInfo world = mt::dist::world_from_env();
  const int64_t total =
      mt::dist::iterations_to_try_all(config.dist(), config.optimizer().max_grad_norm() > 0, world.servers);
  config.set_max_steps(total);
  config.set_epochs(static_cast<int32_t>(std::max<int64_t>(config.epochs(), total)));  // max_steps ends it
  config.mutable_eval()->set_every_epochs(0);
  config.mutable_data()->set_limit_eval_batches(1);
  config.mutable_checkpoint()->set_dir("");  // no checkpoints
  const auto output = a.options.find("--output");
  config.set_output_dir(output != a.options.end() ? output->second : config.output_dir() + "-survey");
  if (world.servers > 0 && world.is_server()) return mt::apps::run_parameter_server(config, world, std::cout);
  mt::apps::TrainerOptions opt;
  opt.overwrite = true;
  mt::apps::Trainer trainer(config, opt);
  trainer.train();
  return 0;
}

int cmd_launch(const std::vector<std::string>& argv) {
  return mt::apps::run_launch(mt::apps::parse_launch_args(argv), "/proc/self/exe");
}

int cmd_help(const std::vector<std::string>&) {
  std::cout << usage() << "\n"
            << "The values of every field that takes one of a list (names in any case):\n";
  for (const auto& [field, choices] : mt::apps::enumerated_fields()) {
    std::cout << "  " << field << ": " << choices << "\n";
  }
  return 0;
}

int cmd_version(const std::vector<std::string>&) {
  std::cout << "mintrain " << kVersion << "\n";
  return 0;
}

// The subcommands, each with its usage (for `COMMAND --help`; "" = the command prints its own).
// A new one is one function and one line here.
struct Command {
  std::function<int(const std::vector<std::string>&)> run;
  const char* usage;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"train", {cmd_train, kTrainUsage}},
      {"eval", {cmd_eval, kEvalUsage}},
      {"launch", {cmd_launch, kLaunchUsage}},
      {"survey", {cmd_survey, kSurveyUsage}},
      {"model", {[](const auto& argv) { return mt::apps::run_model_command(argv, std::cout); }, ""}},
      {"profile-comm",
       {[](const auto& argv) { return mt::apps::run_profile_comm_command(argv, std::cout); }, kProfileCommUsage}},
      {"tokenize", {[](const auto& argv) { return mt::apps::run_tokenize_command(argv, std::cin, std::cout); }, ""}},
      {"plot", {[](const auto& argv) { return mt::apps::run_plot_command(argv, std::cout); }, ""}},
      {"help", {cmd_help, ""}},
      {"version", {cmd_version, ""}},
  };
  return table;
}

// --help or -h among a command's own arguments (not the worker command after launch's `--`).
bool asks_for_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), std::find(args.begin(), args.end(), "--"),
                     [](const std::string& a) { return a == "--help" || a == "-h"; });
}

// Where every error becomes an exit status (see the file's comment).
int exit_status(const std::exception& e) {
  if (dynamic_cast<const UsageError*>(&e) != nullptr) return 2;
  if (dynamic_cast<const mt::core::ConfigError*>(&e) != nullptr) return mt::core::kConfigErrorExit;
  if (dynamic_cast<const mt::core::Interrupted*>(&e) != nullptr) {
    const int sig = g_stop_signal.load();  // stopped while it waited to start: as for the signal
    return 128 + (sig != 0 ? sig : SIGTERM);
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << usage();
    return 2;
  }
  std::string command = args[0];
  if (command == "--help" || command == "-h") command = "help";
  if (command == "--version") command = "version";
  args.erase(args.begin());
  try {
    const auto it = commands().find(command);
    if (it == commands().end()) throw UsageError("unknown command \"" + command + "\"");
    if (*it->second.usage != '\0' && asks_for_help(args)) {
      std::cout << "usage: mintrain\n" << it->second.usage << kTail;
      return 0;
    }
    return it->second.run(args);
  } catch (const std::exception& e) {
    const int status = exit_status(e);
    std::string message = e.what();
    if (status == 2) {
      // One line, and where the usage is (not the whole of it).
      message = message.substr(0, message.find('\n'));
      message += commands().count(command) ? "; see `mintrain " + command + " --help`" : "; see `mintrain help`";
    }
    std::cerr << "mintrain: error: " << message << std::endl;
    return status;
  }
}
