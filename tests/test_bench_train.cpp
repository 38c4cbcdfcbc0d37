// bench_train (apps/train_benchmark.h) and its PyTorch peer: a tiny case is timed and gives a
// positive throughput, bad flags are errors that name the flag, the binary exits non-zero on
// them, and pytorch_train.py builds models with our parameter counts. The PyTorch tests need
// python3-torch, which CI does not install: they skip, visibly, without it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "apps/train_benchmark.h"
#include "apps/trainer.h"
#include "core/kernels/cpu/conv.h"
#include "support/test_helpers.h"

using namespace mt;
using apps::TrainBenchmarkOptions;
using mt::testing::contains;

namespace {

const std::string kSource = MT_SOURCE_DIR;
const std::string kBenchTrain = std::string(MT_BINARY_DIR) + "/apps/bench/bench_train";

struct Outcome {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

Outcome run(const std::string& command) {
  Outcome r;
  FILE* p = popen(("timeout 120 " + command + " 2>&1 </dev/null").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  while (fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int raw = pclose(p);
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  return r;
}

// The message of the Error that parsing `args` throws.
std::string parse_error(const std::vector<std::string>& args) {
  return mt::testing::error_of([&] { apps::parse_train_benchmark_args(args); });
}

// The interpreter that imports torch (bench_train.sh's choice: python3, then /usr/bin/python3),
// or "" when none does. Looked up once: importing torch takes seconds.
const std::string& torch_python() {
  static const std::string python = [] {
    for (const char* p : {"python3", "/usr/bin/python3"}) {
      if (run(std::string(p) + " -c 'import torch'").status == 0) return std::string(p);
    }
    return std::string();
  }();
  return python;
}

#define SKIP_WITHOUT_TORCH()                                                                       \
  if (torch_python().empty())                                                                      \
  GTEST_SKIP() << "no python3 here imports torch (apt-get install python3-torch); the PyTorch "    \
                  "peer is not tested"

// key=value fields of a result line.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  size_t pos = 0;
  while (pos < line.size()) {
    size_t end = line.find_first_of(" \n", pos);
    if (end == std::string::npos) end = line.size();
    const std::string word = line.substr(pos, end - pos);
    if (const size_t eq = word.find('='); eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
    pos = end + 1;
  }
  return f;
}

TrainBenchmarkOptions tiny(const std::string& model) {
  TrainBenchmarkOptions o;
  o.model = model;
  o.batch = 4;
  o.seq_len = 16;
  o.vocab = 64;
  o.warmup = 1;
  o.iters = 2;
  o.repeats = 2;
  o.threads = 1;
  return o;
}

}  // namespace

TEST(BenchTrain, TimesATinyImageCase) {
  const TrainBenchmarkOptions o = tiny("lenet5");
  const apps::TrainBenchmarkResult r = apps::run_train_benchmark(o);
  ASSERT_EQ(r.runs.size(), 2u);
  for (double v : r.runs) EXPECT_GT(v, 0.0);
  EXPECT_GT(r.median, 0.0);
  EXPECT_EQ(r.unit, "img");
  EXPECT_EQ(r.parameters, 61706);  // LeNet-5 on 1x28x28, 10 classes
  EXPECT_TRUE(std::isfinite(r.last_loss));
  const auto f = fields(apps::train_benchmark_line(o, r));
  EXPECT_EQ(f.at("model"), "lenet5");
  EXPECT_GT(std::stod(f.at("throughput")), 0.0);
  EXPECT_EQ(f.at("params"), "61706");
}

TEST(BenchTrain, TimesATinyBertCaseInSequences) {
  TrainBenchmarkOptions o = tiny("bert_tiny");
  o.precision = "fp16";  // loss scaling on the way: the step must still run (emulated on the CPU)
  const apps::TrainBenchmarkResult r = apps::run_train_benchmark(o);
  EXPECT_GT(r.median, 0.0);
  EXPECT_EQ(r.unit, "seq");
  EXPECT_TRUE(std::isfinite(r.last_loss));
}

// --profile: entries for the convolution kernels and the step's phases, per step, that add up
// to the profiled step (the last line is the time outside every scope); a build without oneDNN
// runs the im2col kernels and says so in the setup.
TEST(BenchTrain, ProfilesPerOpAndNamesTheConvolutions) {
  TrainBenchmarkOptions o = tiny("lenet5");
  o.profile = 2;
  const apps::TrainBenchmarkResult r = apps::run_train_benchmark(o);
  EXPECT_EQ(contains(r.setup, "im2col-conv"), !mt::core::cpu::conv_has_fast_impl()) << r.setup;
  std::map<std::string, double> ms;
  double sum = 0.0;
  for (const auto& [name, seconds] : r.profile) {
    ms[name] = seconds * 1e3;
    sum += seconds;
  }
  EXPECT_GT(ms["conv2d_forward"], 0.0);
  EXPECT_GT(ms["conv2d_backward"], 0.0);
  EXPECT_GT(ms["(optimizer step and NaN check)"], 0.0);
  EXPECT_GT(ms["Conv2dBackward"], 0.0);  // the node's own time, outside its kernel
  EXPECT_LE(sum, r.profile_step_seconds * 1.001);
  const std::string lines = apps::train_benchmark_profile_lines(r);
  EXPECT_TRUE(contains(lines, "bench_train_op name=conv2d_forward ms_per_step=")) << lines;
  EXPECT_TRUE(contains(lines, "bench_train_op name=(optimizer_step_and_NaN_check) ")) << lines;
  EXPECT_TRUE(contains(lines, "bench_train_op name=(outside_scopes) ")) << lines;
}

TEST(BenchTrain, RejectsBadInputNamingTheFlag) {
  EXPECT_TRUE(contains(parse_error({"--model", "resnet9"}), "--model: unknown model \"resnet9\"; give one of: "));
  EXPECT_TRUE(contains(parse_error({"--batch", "8"}), "--model is required"));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--precision", "fp64"}), "--precision: \"fp64\""));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--precision", "tf32"}), "on the CPU give fp32"));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--batch", "0"}), "--batch: \"0\" must be an integer >= 1"));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--batch", "many"}), "--batch: \"many\" is not a number"));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--device", "gpu"}), "--device: unknown device \"gpu\""));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--iters"}), "--iters needs a value"));
  EXPECT_TRUE(contains(parse_error({"--model", "lenet5", "--speed", "1"}), "unknown option \"--speed\""));
  EXPECT_NO_THROW(apps::parse_train_benchmark_args(
      {"--model", "resnet50", "--batch", "128", "--device", "cuda", "--precision", "bf16"}));
}

TEST(BenchTrain, BinaryExitsNonZeroWithTheReason) {
  Outcome r = run(kBenchTrain + " --model lenet5 --batch 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "bench_train: error: --batch: \"0\" must be an integer >= 1"));
  r = run(kBenchTrain + " --model lenet5 --batch 2 --device cuda:7 --iters 1 --repeats 1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "--device cuda:7: not available here"));
}

TEST(BenchTrainPeer, DdpAccuracyPeerNamesAMissingDataset) {
  SKIP_WITHOUT_TORCH();
  const Outcome r = run(torch_python() + " " + kSource + "/apps/bench/pytorch_ddp_accuracy.py --nproc 1 --data /nonexistent");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no train-images-idx3-ubyte[.gz]")) << r.output;
  EXPECT_TRUE(contains(r.output, "in /nonexistent; apt-get install dataset-fashion-mnist")) << r.output;
}

TEST(BenchTrainPeer, ParameterCountsMatchOurs) {
  SKIP_WITHOUT_TORCH();
  const std::vector<std::string> models = {"mlp", "lenet5", "resnet20", "resnet50", "bert_tiny"};
  std::string list;
  for (const auto& m : models) list += (list.empty() ? "" : ",") + m;
  const Outcome r = run(torch_python() + " " + kSource + "/apps/bench/pytorch_train.py --params-only --model " + list);
  ASSERT_EQ(r.status, 0) << r.output;
  std::map<std::string, std::string> theirs;
  size_t start = 0;
  for (size_t end; (end = r.output.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto f = fields(r.output.substr(start, end - start));
    if (f.count("model") && f.count("params")) theirs[f.at("model")] = f.at("params");
  }
  for (const auto& m : models) {
    apps::TrainerOptions quiet;
    quiet.quiet = true;
    TrainBenchmarkOptions o;
    o.model = m;
    o.batch = 1;
    apps::Trainer ours(apps::train_benchmark_config(o), quiet);
    EXPECT_EQ(theirs[m], std::to_string(ours.model().num_parameters())) << m << "\n" << r.output;
  }
}

TEST(BenchTrainPeer, ScriptPrintsOneTableRowPerCase) {
  SKIP_WITHOUT_TORCH();
  const Outcome r = run("bash " + kSource + "/apps/scripts/bench_train.sh --bin " + kBenchTrain +
                    " --cases lenet5:fp32:4 --iters 2 --warmup 1 --repeats 1 --threads 1 --python " + torch_python());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| case | device | precision | batch | mintrain | PyTorch | ratio | target |"));
  EXPECT_TRUE(contains(r.output, "| LeNet-5 28x28 | cpu | fp32 | 4 | "));
  EXPECT_TRUE(contains(r.output, "| equal (61706) |"));
}

TEST(BenchTrainPeer, ScriptProfilesBothSides) {
  SKIP_WITHOUT_TORCH();
  const Outcome r = run("bash " + kSource + "/apps/scripts/bench_train.sh --bin " + kBenchTrain +
                        " --cases lenet5:fp32:4 --iters 2 --warmup 1 --repeats 1 --threads 1 --profile 2 --python " +
                        torch_python());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Per-op self time, LeNet-5 28x28 fp32 batch 4, 2 steps")) << r.output;
  EXPECT_TRUE(contains(r.output, "| # | mintrain | ms | PyTorch | ms |")) << r.output;
  EXPECT_TRUE(contains(r.output, "aten::")) << r.output;
  EXPECT_TRUE(contains(r.output, "conv2d_")) << r.output;
  EXPECT_TRUE(contains(r.output, "| | all (the step) | ")) << r.output;
}

TEST(BenchTrainScript, WithoutPyTorchTheRowSaysSo) {
  const Outcome r = run("bash " + kSource + "/apps/scripts/bench_train.sh --bin " + kBenchTrain +
                    " --cases lenet5:fp32:4 --iters 2 --warmup 1 --repeats 1 --threads 1 --python /nonexistent/python3");
  EXPECT_EQ(r.status, 1) << r.output;  // a cell without a figure
  EXPECT_TRUE(contains(r.output, "| LeNet-5 28x28 | cpu | fp32 | 4 | "));
  EXPECT_TRUE(contains(r.output, "n/a: PyTorch not importable by /nonexistent/python3"));
}
