// The `mintrain` command.
//
//   mintrain train CONFIG [--set k=v ...] [--resume PATH] [--output DIR]
//   mintrain eval CONFIG --checkpoint PATH [--set k=v ...]
//   mintrain launch --nproc-per-node N [...] -- train CONFIG ...
//   mintrain help | version
//
// Every user error ends as "mintrain: error: <message>" on stderr and exit status 1; bad
// arguments print the usage and exit 2; an interrupted run (Ctrl-C) saves a checkpoint and
// exits 130.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "apps/config.h"
#include "apps/launch.h"
#include "apps/trainer.h"
#include "core/error.h"
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
    "  train CONFIG [--set k=v ...] [--resume PATH] [--output DIR]\n"
    "                     train a model; --resume continues from a checkpoint file or folder\n"
    "  eval CONFIG --checkpoint PATH [--set k=v ...]\n"
    "                     test accuracy and loss of a checkpoint\n"
    "  launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]\n"
    "         -- COMMAND ...\n"
    "                     run N workers of `mintrain COMMAND ...` here (e.g. -- train CONFIG), each\n"
    "                     with RANK/WORLD_SIZE/MASTER_ADDR/...; output lines start with [rank R]\n"
    "  help               this text, with the models, optimizers, schedules and datasets\n"
    "  version            the version\n"
    "\n"
    "--set path.to.field=value overrides one config field (see configs/mintrain.proto), e.g.\n"
    "  --set epochs=1 --set optimizer.lr=0.02 --set lr_schedule.milestones=[80,120]\n";

// Thrown for malformed command lines: main prints the usage after the message.
struct UsageError : mt::core::Error {
  using mt::core::Error::Error;
};

// Set by the first Ctrl-C; the trainer checkpoints and returns. A second one kills the process
// (SA_RESETHAND), for when the user really wants out.
std::atomic<bool> g_stop{false};
extern "C" void on_interrupt(int) { g_stop.store(true); }

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
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

  install_interrupt_handler();
  mt::apps::TrainerOptions opt;
  opt.stop_flag = &g_stop;
  mt::apps::Trainer trainer(config, opt);
  if (auto it = a.options.find("--resume"); it != a.options.end()) trainer.resume(it->second);
  const mt::apps::TrainResult r = trainer.train();
  if (r.interrupted) {
    std::cerr << "mintrain: interrupted";
    if (!r.last_checkpoint.empty()) {
      std::cerr << "; to continue, run the same command with --resume " << r.last_checkpoint;
    }
    std::cerr << std::endl;
    return 130;
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

int cmd_help(const std::vector<std::string>&) {
  std::cout << kUsage << "\n"
            << "models:        " << join(mt::layers::model_names()) << "\n"
            << "optimizers:    " << join(mt::optim::optimizer_names()) << "\n"
            << "lr schedules:  " << join(mt::optim::lr_schedule_types()) << "\n"
            << "datasets:      " << join(mt::data::dataset_types()) << "\n";
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
