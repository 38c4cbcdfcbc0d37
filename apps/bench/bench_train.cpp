// Training throughput of one case, mintrain's side: full training steps (forward, loss, backward,
// optimizer step) of a model on synthetic data already on the device, timed after a warm-up.
// A benchmark, not a test: it prints one parseable line and asserts nothing.
//
//   build/release/apps/bench/bench_train --model resnet50 --batch 128 --device cuda --precision bf16
//
// apps/train_benchmark.h says what exactly is timed; apps/bench/pytorch_train.py times the same
// case in PyTorch, and apps/scripts/bench_train.sh runs both over a list of cases and prints one
// table of ours, PyTorch's and the ratio.
#include <cstdio>
#include <string>
#include <vector>

#include "apps/train_benchmark.h"
#include "core/error.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", mt::apps::train_benchmark_usage().c_str());
      return 0;
    }
  }
  mt::apps::TrainBenchmarkOptions options;
  try {
    options = mt::apps::parse_train_benchmark_args(args);
  } catch (const mt::core::Error& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 2;  // a bad command line, as `mintrain` exits for one
  }
  try {
    const mt::apps::TrainBenchmarkResult result = mt::apps::run_train_benchmark(options);
    std::printf("%s\n%s", mt::apps::train_benchmark_line(options, result).c_str(),
                mt::apps::train_benchmark_profile_lines(result).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
