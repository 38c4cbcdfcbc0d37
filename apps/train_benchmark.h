// Training throughput of one case (model, batch, device, precision): the core of bench_train
// (apps/bench/bench_train.cpp). Its PyTorch peer, apps/bench/pytorch_train.py, times the same
// cases the same way, and apps/scripts/bench_train.sh runs both and prints one table.
//
// The step timed is a `mintrain train` step on a batch that is already on the device: the
// Trainer builds the model, optimizer (inside its StepGuard: the NaN/Inf check every run pays),
// loss scaler and numeric settings from a config exactly as for training, its task makes one
// synthetic batch (images and labels, or token ids and MLM labels masked by the MLM loader),
// and each step is
//     task.predict -> backward (seeded with the loss scale) -> optimizer step -> zero_grad
// Left out, as the peer has no counterpart: the data loader (the batch stays on the device),
// the schedule, the progress line's loss/accuracy reads and checkpoints.
//
// Timing: `warmup` steps, then `repeats` spans of `iters` steps, each ended by a device
// synchronize before the clock is read; the figure is the median span's units/s (images/s, or
// sequences/s for BERT).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/config.h"

namespace mt::apps {

struct TrainBenchmarkOptions {
  std::string model;               // any name of the model registry (required)
  int64_t batch = 64;
  std::string device = "cpu";      // cpu | cuda | cuda:N
  std::string precision = "fp32";  // fp32 | tf32 (fp32 on TF32 tensor cores) | bf16 | fp16
  int64_t image_size = 0;          // images: 0 = the model's usual size (28, 32 or 224)
  int64_t seq_len = 128;           // BERT
  int64_t vocab = 30522;           // BERT: BERT's WordPiece vocabulary size
  int warmup = 5;
  int iters = 20;
  int repeats = 3;
  int threads = 0;             // CPU threads; 0 = OMP_NUM_THREADS, else all cores
  bool cudnn_benchmark = true;  // time cuDNN's algorithms per shape, as PyTorch's cudnn.benchmark
  int profile = 0;              // steps to profile per op after the timed spans (0: none)
};

// Parses bench_train's flags ("--model resnet20 --batch 32 ..."). A bad flag or value is an
// Error naming the flag, what is wrong and what to give instead.
TrainBenchmarkOptions parse_train_benchmark_args(const std::vector<std::string>& args);
std::string train_benchmark_usage();

// The run config of the case: what `mintrain train` would be given for it (model, precision,
// cuda.allow_tf32, optimizer), on synthetic data of exactly one batch per epoch, so that the
// loader makes the one batch the steps reuse and then stops.
RunConfig train_benchmark_config(const TrainBenchmarkOptions& options);

struct TrainBenchmarkResult {
  std::string unit;             // "img" or "seq"
  int64_t parameters = 0;       // the model's parameter count (compared with the peer's)
  std::vector<double> runs;     // units/s of each timed span
  double median = 0.0;          // units/s: the figure
  double last_loss = 0.0;       // of the last step (a sanity check: finite)
  int64_t overflow_steps = 0;   // fp16: steps the loss scaler skipped while timed
  std::string setup;            // what was measured: the device, threads, precision settings
  // --profile: self time per kernel / backward node / step phase (core/op_profile.h), in
  // seconds per step, largest first, and the profiled steps' own time per step. On a GPU every
  // scope waits for the device, so these are kernel times, and the profiled step is slower than
  // the timed ones by the launch overlap it gives up.
  std::vector<std::pair<std::string, double>> profile;
  double profile_step_seconds = 0.0;
};

// Builds the case and times it. Errors (no such device, out of memory) are Errors.
TrainBenchmarkResult run_train_benchmark(const TrainBenchmarkOptions& options);

// The one line bench_train prints and bench_train.sh parses: "bench_train key=value ...".
std::string train_benchmark_line(const TrainBenchmarkOptions& options, const TrainBenchmarkResult& result);
// --profile's lines, one per entry: "bench_train_op name=... ms_per_step=... share=..." (share:
// of the profiled step's time; spaces in names become '_'), and a last one for the time
// outside every scope.
std::string train_benchmark_profile_lines(const TrainBenchmarkResult& result);

}  // namespace mt::apps
