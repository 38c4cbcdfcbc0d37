#include "apps/train_benchmark.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "apps/config.h"
#include "apps/flags.h"
#include "apps/trainer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/kernels/cpu/conv.h"
#include "core/op_profile.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "core/synchronize.h"
#include "layers/models/registry.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/math_mode.h"
#endif

namespace mt::apps {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kPrecisions = {"fp32", "tf32", "bf16", "fp16"};

bool is_bert(const std::string& model) { return model.rfind("bert", 0) == 0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

RunConfig train_benchmark_config(const TrainBenchmarkOptions& o) {
  RunConfig c;
  c.set_name("bench_train");
  c.set_seed(1);
  c.set_device(o.device);
  c.set_threads(o.threads);
  c.set_precision(o.precision == "tf32" ? "fp32" : o.precision);
  c.mutable_cuda()->set_allow_tf32(o.precision == "tf32");
  c.mutable_model()->set_name(o.model);
  auto& d = *c.mutable_data();
  d.set_batch_size(o.batch);
  d.set_drop_last(true);
  auto& opt = *c.mutable_optimizer();
  if (is_bert(o.model)) {
    c.mutable_model()->mutable_bert()->set_max_position(std::max<int64_t>(512, o.seq_len));
    d.set_type("synthetic_tokens");
    auto& t = *d.mutable_text();
    t.set_seq_len(o.seq_len);
    t.set_synthetic_sequences(o.batch);
    t.set_synthetic_vocab(o.vocab);
    t.set_mask_prob(0.15f);
    // AdamW with BERT's settings (configs/bert_base_mlm.prototxt), decay on every parameter.
    opt.set_name("adamw");
    opt.set_lr(1e-4);
    opt.set_eps(1e-6);
    opt.set_weight_decay(0.01);
  } else {
    // The input images each image model is built for: [channels, side, side], and its classes.
    struct {
      int64_t channels, side, classes;
    } ic{1, 28, 10};                                                         // mlp, lenet5: Fashion-MNIST
    if (o.model.rfind("resnet", 0) == 0) ic = {3, 32, 10};                 // resnet20/32/56: CIFAR-10
    if (o.model == "resnet18" || o.model == "resnet50") ic = {3, 224, 1000};  // ImageNet
    if (o.image_size > 0) ic.side = o.image_size;
    d.set_type("synthetic");
    auto& s = *d.mutable_synthetic();
    s.set_size(o.batch);
    s.add_shape(ic.channels);
    s.add_shape(ic.side);
    s.add_shape(ic.side);
    // Labels of 10 classes whatever the model's width: the cost is the same, and the dataset's
    // per-class prototype images (1000 of 3x224x224 would be 600 MB) stay small.
    s.set_classes(10);
    c.mutable_model()->set_num_classes(ic.classes);
    opt.set_name("sgd");
    opt.set_lr(0.01);
    opt.set_momentum(0.9);
    opt.set_weight_decay(1e-4);
  }
  return c;
}

std::string train_benchmark_usage() {
  return "usage: bench_train --model NAME [--batch N] [--device cpu|cuda|cuda:N]\n"
         "                   [--precision fp32|tf32|bf16|fp16] [--image-size N] [--seq-len N] [--vocab N]\n"
         "                   [--warmup N] [--iters N] [--repeats N] [--threads N] [--cudnn-benchmark 0|1]\n"
         "                   [--profile N]\n"
         "  Times full training steps of one case on synthetic data already on the device and prints\n"
         "  one line: bench_train framework=mintrain model=... throughput=<median units/s> ...\n"
         "  models: " + core::join(layers::model_names()) + "\n"
         "  defaults: --batch 64 --device cpu --precision fp32 --seq-len 128 --vocab 30522\n"
         "            --warmup 5 --iters 20 --repeats 3 --threads 0 (all cores) --cudnn-benchmark 1\n"
         "  --profile N: then N more steps with per-op timing (self time per kernel, backward node and\n"
         "            step phase; one bench_train_op line each, ms per step), not part of the figure\n"
         "  apps/scripts/bench_train.sh runs a list of cases against PyTorch and prints a table.";
}

TrainBenchmarkOptions parse_train_benchmark_args(const std::vector<std::string>& args) {
  TrainBenchmarkOptions o;
  Flags f("", args, "see --help");
  while (f.next()) {
    if (f.is("--model")) o.model = f.value();
    else if (f.is("--batch")) o.batch = f.integer(1);
    else if (f.is("--device")) o.device = f.value();
    else if (f.is("--precision")) o.precision = f.value();
    else if (f.is("--image-size")) o.image_size = f.integer(1);
    else if (f.is("--seq-len")) o.seq_len = f.integer(8);
    else if (f.is("--vocab")) o.vocab = f.integer(16);
    else if (f.is("--warmup")) o.warmup = f.integer(0);
    else if (f.is("--iters")) o.iters = f.integer(1);
    else if (f.is("--repeats")) o.repeats = f.integer(1);
    else if (f.is("--threads")) o.threads = f.integer(0);
    else if (f.is("--cudnn-benchmark")) o.cudnn_benchmark = f.integer(0) != 0;
    else if (f.is("--profile")) o.profile = f.integer(0);
    else f.unknown();
  }
  const std::vector<std::string> models = layers::model_names();
  MT_CHECK(!o.model.empty(), "--model is required; give one of: ", core::join(models));
  MT_CHECK(std::find(models.begin(), models.end(), o.model) != models.end(), "--model: unknown model \"",
           o.model, "\"; give one of: ", core::join(models));
  MT_CHECK(std::find(kPrecisions.begin(), kPrecisions.end(), o.precision) != kPrecisions.end(),
           "--precision: \"", o.precision, "\" is not a precision; give one of: ", core::join(kPrecisions));
  bool cpu = false;
  try {
    cpu = core::Device::parse(o.device).is_cpu();
  } catch (const core::Error& e) {
    MT_FAIL("--device: ", e.what());
  }
  MT_CHECK(!(cpu && o.precision == "tf32"), "--precision tf32 selects the GPU's TF32 tensor cores; on the CPU "
           "give fp32 (or bf16/fp16, which the CPU emulates)");
  return o;
}

TrainBenchmarkResult run_train_benchmark(const TrainBenchmarkOptions& options) {
  const core::Device device = core::Device::parse(options.device);
  MT_CHECK(device.is_cpu() || device.index < core::cuda_device_count(), "--device ", options.device,
           ": not available here (", core::cuda_device_count(), " CUDA devices visible",
           core::cuda_device_count() == 0 ? ": " + core::cuda_unavailable_reason() : std::string(),
           "); give --device cpu, or run where nvidia-smi shows a GPU");
  TrainerOptions topts;
  topts.quiet = true;
  Trainer trainer(train_benchmark_config(options), topts);  // threads, precision, TF32, model, optimizer
#ifdef MT_CUDA_KERNELS
  core::cuda::set_conv_benchmark(device.is_cuda() && options.cudnn_benchmark);
#endif

  // One batch from the task's own loader, moved to the device once: every step reads it.
  Task& task = trainer.task();
  data::BatchLoader* loader = task.train_loader();
  loader->start_epoch(0);
  data::Batch batch;
  MT_CHECK(loader->next(batch), "the synthetic training set gave no batch of ", options.batch);
  batch.inputs = batch.inputs.to(device);
  batch.targets = batch.targets.to(device);
  if (batch.mask.defined()) batch.mask = batch.mask.to(device);

  layers::Module& model = trainer.model();
  optim::StepGuard& optimizer = trainer.optimizer();
  model.train();
  core::Tensor loss;
  // The phases are profile scopes (core/op_profile.h): with --profile, each phase's time outside
  // the kernels and backward nodes inside it is an entry of its own.
  auto step = [&] {
    {
      core::ProfileScope scope("(forward outside kernels)");
      loss = task.predict(model, batch).loss;
    }
    // fp16 runs scale the loss (as the trainer does); the guard unscales before the update.
    const double scale = optimizer.loss_scale();
    {
      core::ProfileScope scope("(backward engine)");
      loss.backward(scale != 1.0 ? core::Tensor::full(loss.shape(), scale, core::DType::Float32, loss.device())
                                 : core::Tensor());
    }
    {
      core::ProfileScope scope("(optimizer step and NaN check)");
      optimizer.step();
    }
    core::ProfileScope scope("(zero_grad)");
    optimizer.zero_grad();
  };

  for (int i = 0; i < options.warmup; ++i) step();
  core::synchronize(device);
  const int64_t skipped_before = optimizer.skipped_steps();
  const optim::DynamicLossScaler* scaler = optimizer.loss_scaler();
  const int64_t overflows_before = scaler ? scaler->overflow_steps() : 0;

  TrainBenchmarkResult r;
  for (int rep = 0; rep < options.repeats; ++rep) {
    const auto start = Clock::now();
    for (int i = 0; i < options.iters; ++i) step();
    core::synchronize(device);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    r.runs.push_back(static_cast<double>(options.iters * options.batch) / seconds);
  }
  // A step the guard skipped for NaN/Inf gradients did no update: timing it would flatter us.
  MT_CHECK(optimizer.skipped_steps() == skipped_before, optimizer.skipped_steps() - skipped_before,
           " timed steps had NaN/Inf gradients and were skipped, so the figure is not a training step's; "
           "check the model at this precision");
  r.overflow_steps = scaler ? scaler->overflow_steps() - overflows_before : 0;
  r.median = median(r.runs);
  r.last_loss = loss.item();  // of the timed steps: the profiled ones below come after
  if (options.profile > 0) {
    core::reset_op_profile();
    core::set_op_profiling(true, device);  // on a GPU: kernel time, not launch time
    const auto start = Clock::now();
    for (int i = 0; i < options.profile; ++i) step();
    core::synchronize(device);
    r.profile_step_seconds = std::chrono::duration<double>(Clock::now() - start).count() / options.profile;
    core::set_op_profiling(false);
    for (const auto& e : core::op_profile()) r.profile.emplace_back(e.name, e.seconds / options.profile);
  }
  r.parameters = model.num_parameters();
  r.unit = is_bert(options.model) ? "seq" : "img";
  std::ostringstream setup;
  setup << device.str();
  if (device.is_cpu()) {
    setup << "/" << core::num_threads() << "threads";
    if (!core::cpu::conv_has_fast_impl()) setup << "/im2col-conv";
  }
  r.setup = setup.str();
  return r;
}

std::string train_benchmark_line(const TrainBenchmarkOptions& o, const TrainBenchmarkResult& r) {
  std::ostringstream line;
  line << "bench_train framework=mintrain model=" << o.model << " device=" << o.device << " precision=" << o.precision
       << " batch=" << o.batch << " unit=" << r.unit << " params=" << r.parameters
       << " throughput=" << core::formatted("%.1f", r.median) << " runs=";
  for (size_t i = 0; i < r.runs.size(); ++i) line << (i ? "," : "") << core::formatted("%.1f", r.runs[i]);
  line << " iters=" << o.iters << " loss=" << core::formatted("%.4f", r.last_loss)
       << " overflow_steps=" << r.overflow_steps << " setup=" << r.setup;
  return line.str();
}

std::string train_benchmark_profile_lines(const TrainBenchmarkResult& r) {
  std::ostringstream out;
  double inside = 0.0;
  auto line = [&](std::string name, double seconds) {
    std::replace(name.begin(), name.end(), ' ', '_');  // one token, as the line's other fields
    const double share = r.profile_step_seconds > 0 ? seconds / r.profile_step_seconds : 0.0;
    out << "bench_train_op name=" << name << " ms_per_step=" << core::formatted("%.3f", seconds * 1e3)
        << " share=" << core::formatted("%.3f", share) << "\n";
  };
  for (const auto& [name, seconds] : r.profile) {
    line(name, seconds);
    inside += seconds;
  }
  if (!r.profile.empty()) line("(outside_scopes)", std::max(0.0, r.profile_step_seconds - inside));
  return out.str();
}

}  // namespace mt::apps
