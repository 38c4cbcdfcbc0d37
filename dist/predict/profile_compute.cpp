#include "dist/predict/profile_compute.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/grad_mode.h"
#include "core/ops/matmul.h"
#include "core/random.h"
#include "dist/replicas.h"

namespace mt::dist {
ComputeChunk::ComputeChunk(int reps) : reps_(std::max(1, reps)) {
  core::Generator gen(7);
  a_ = core::rand_uniform({96, 96}, -0.1f, 0.1f, gen);
  x_ = core::rand_uniform({96, 96}, -0.1f, 0.1f, gen);
}

void ComputeChunk::run() {
  core::NoGradGuard no_grad;
  for (int r = 0; r < reps_; ++r) x_ = core::matmul(a_, x_);
}

ComputeChunk calibrated_chunk(ProcessGroup& group, core::Device device, double seconds) {
  ComputeChunk probe(1);
  probe.run();  // warm-up
  group.barrier();
  // Products per second over a window of several scheduler time slices, every rank at once:
  // probes shorter than a slice mostly run undisturbed on a core and measured the speed of a
  // core alone (docs/PERF.md).
  constexpr double kWindow = 0.25;
  const auto start = ProfileClock::now();
  int64_t reps = 0;
  while (seconds_since(start) < kWindow) {
    probe.run();
    ++reps;
  }
  const double rate = mean_over_ranks(group, device, {static_cast<double>(reps) / seconds_since(start)},
                                      "sharing the compute chunk's size")[0];
  return ComputeChunk(static_cast<int>(std::clamp(std::lround(std::ceil(seconds * rate)), 1L, 1L << 20)));
}

ComputeInBackground::ComputeInBackground()
    : thread_([this] {
        ComputeChunk chunk(1);
        while (!stop_.load(std::memory_order_relaxed)) chunk.run();
      }) {}

ComputeInBackground::~ComputeInBackground() {
  stop_ = true;
  thread_.join();
}

void compute_for(double seconds) {
  static thread_local ComputeChunk chunk(1);
  const auto start = ProfileClock::now();
  while (seconds_since(start) < seconds) chunk.run();
}

double from_rank0(ProcessGroup& group, core::Device device, double value, const std::string& what) {
  Tensor t = Tensor::full({1}, static_cast<float>(value), core::DType::Float32, device);
  finish(group.broadcast(t, 0), group, what);
  return static_cast<double>(t.to(core::Device::cpu()).item());
}

std::vector<double> mean_over_ranks(ProcessGroup& group, core::Device device, const std::vector<double>& values,
                                    const std::string& what) {
  std::vector<float> host(values.begin(), values.end());
  Tensor t = Tensor::from_vector(host, {static_cast<int64_t>(host.size())}).to(device);
  finish(group.allreduce(t), group, what);
  std::vector<double> out;
  for (float v : t.to(core::Device::cpu()).to_vector()) out.push_back(static_cast<double>(v) / group.size());
  return out;
}

double seconds_since(ProfileClock::time_point start) {
  return std::chrono::duration<double>(ProfileClock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace mt::dist
