#include "dist/comm/link_cost.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

LinkCost fit_link_cost(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  MT_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2,
           "fit_link_cost needs at least two (size, time) measurements, got ", bytes.size());
  // Weighted normal equations with weights 1 / seconds^2. Sizes are scaled to MB first so the
  // sums stay well inside double precision.
  constexpr double kScale = 1e-6;
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    MT_CHECK(seconds[i] > 0, "fit_link_cost: measured times must be > 0, got ", seconds[i]);
    const double w = 1.0 / (seconds[i] * seconds[i]);
    const double x = bytes[i] * kScale;
    sw += w;
    sx += w * x;
    sy += w * seconds[i];
    sxx += w * x * x;
    sxy += w * x * seconds[i];
  }
  const double det = sw * sxx - sx * sx;
  MT_CHECK(det > 1e-12 * sw * sxx, "fit_link_cost needs at least two distinct message sizes");
  LinkCost c;
  c.beta = std::max(0.0, (sw * sxy - sx * sy) / det) * kScale;
  c.alpha = std::max(0.0, (sy - c.beta / kScale * sx) / sw);
  return c;
}

namespace {

// expected_seconds <= 0: not known (the first sizes).
SizeTiming timing_for(double expected_seconds) {
  constexpr double kWarmUpBelow = 0.05, kSecondsPerSize = 1.0;
  if (expected_seconds <= 0) return {};
  const int runs = static_cast<int>(std::clamp(kSecondsPerSize / expected_seconds, 2.0, double{kTimedRuns}));
  return {runs, expected_seconds < kWarmUpBelow};
}

}  // namespace

LinkCost fit_over_sizes(double max_bytes, double max_seconds, const std::function<double(int64_t, SizeTiming)>& agreed_seconds) {
  std::vector<double> bytes, seconds;
  for (int64_t floats : {256, 2048, 16384, 131072, 1048576}) {
    const double expected = bytes.size() < 2 ? 0.0 : seconds.back() * floats * 4.0 / bytes.back();
    if (floats > 2048 && (floats * 4.0 > max_bytes || (max_seconds > 0 && expected > max_seconds))) break;
    bytes.push_back(static_cast<double>(floats) * 4.0);
    seconds.push_back(std::max(agreed_seconds(floats, timing_for(expected)), 1e-9));
  }
  return fit_link_cost(bytes, seconds);
}

double median_seconds(const std::function<void()>& op, SizeTiming timing) {
  if (timing.warm_up) op();
  std::vector<double> times;
  for (int i = 0; i < timing.runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    op();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return (times[(n - 1) / 2] + times[n / 2]) / 2;
}

LinkCost measure_link_cost(ProcessGroup& group, core::Device device, double max_bytes, double max_seconds) {
  return fit_over_sizes(max_bytes, max_seconds, [&](int64_t floats, SizeTiming timing) {
    Tensor t = Tensor::zeros({floats}, core::DType::Float32, device);
    const std::string what = "timing an allreduce of " + std::to_string(floats * 4) + " bytes (the network's cost)";
    const double mine = median_seconds([&] { finish(group.allreduce(t), group, what); }, timing);
    Tensor time = Tensor::from_vector(std::vector<float>{static_cast<float>(mine)}, {1}).to(device);
    finish(group.broadcast(time, 0), group, "broadcast of rank 0's allreduce time");
    return static_cast<double>(time.to_vector()[0]);
  });
}

}  // namespace mt::dist
