// The network as S-SGD's MG-WFBP plans with it: T(M) = alpha + beta * M per allreduce of M bytes
// (alpha: start-up latency, beta: seconds per byte; for a ring allreduce on n ranks roughly
// 2(n-1) latency + 2(n-1)/n M / bandwidth), fitted to allreduces timed at start-up or given in
// the config (dist.ssgd.alpha/beta).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/device.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

struct LinkCost {
  LinkCost() = default;
  LinkCost(double alpha_s, double beta_s_per_byte, double gamma_s = 0.0)
      : alpha(alpha_s), beta(beta_s_per_byte), gamma(gamma_s) {}
  double alpha = 0.0;  // seconds per message
  double beta = 0.0;   // seconds per byte
  // Shared cores only (dist.ssgd.gamma, 0 by default): seconds of compute each message sent
  // during backward takes from the training threads when the ranks have no core to spare for
  // communication. With cores of its own (a GPU's copy engines, a spare core) it is 0.
  double gamma = 0.0;
  double time(double bytes) const { return alpha + beta * bytes; }
};

// Least-squares fit of seconds ~ alpha + beta * bytes (at least two distinct sizes), in relative
// error (each residual divided by its time): every size counts alike, where plain least squares
// lets the largest messages decide alpha alone. alpha and beta are clamped at 0 (a negative
// cost is noise). Times must be > 0.
LinkCost fit_link_cost(const std::vector<double>& bytes, const std::vector<double>& seconds);

// How one size is timed. A warm-up run first (connections, buffers), then the median of `runs`;
// a size expected to take long runs fewer times and without the warm-up: at 100 Mbit/s one
// 4 MiB allreduce takes half a second, and six of them were most of auto's first decision.
constexpr int kTimedRuns = 5;
struct SizeTiming {
  int runs = kTimedRuns;
  bool warm_up = true;
  int exchanges() const { return runs + (warm_up ? 1 : 0); }
};
double median_seconds(const std::function<void()>& op, SizeTiming timing);

// The fit over messages of 1 KiB .. 4 MiB: `agreed_seconds(floats, timing)` times one size
// (median_seconds) and returns a time every rank agrees on. Sizes above max_bytes are skipped
// (the two smallest always run): on a slow link 4 MiB takes seconds. max_seconds > 0 also skips
// a size that would take longer once, judged from the size before it, which also sets its
// timing. Every rank stops at the same size and returns the same fit.
LinkCost fit_over_sizes(double max_bytes, double max_seconds,
                        const std::function<double(int64_t floats, SizeTiming timing)>& agreed_seconds);

// Times allreduces on `group` over fit_over_sizes's sizes and fits alpha and beta. Collective;
// every rank fits rank 0's times, so all plan alike.
LinkCost measure_link_cost(ProcessGroup& group, core::Device device, double max_bytes, double max_seconds = 0.0);

}  // namespace mt::dist
