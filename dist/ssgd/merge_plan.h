// Which gradients travel together, and when (S-SGD's schedules; docs/algorithms.md). Layers are
// numbered in forward order 0 .. L-1, so backward runs L-1 .. 0; times are seconds, sizes
// bytes. A plan is a list of messages in send order, each listing its layers in backward order
// (message.back() is the layer whose gradient completes it). MG-WFBP's plan is a function of
// the profiled backward times and the link's alpha and beta, nothing else: the runtime owns
// it, and the cost model (predict/) predicts what it does.
#pragma once
#include <string>
#include <vector>

#include "dist/comm/link_cost.h"

namespace mt::dist {

// When the gradient exchange runs.
enum class Schedule { BSP, WFBP, FUSION, MGWFBP };
Schedule parse_schedule(const std::string& name);  // "bsp", "wfbp", "fusion", "mgwfbp"
std::vector<std::string> schedule_names();
std::string schedule_name(Schedule schedule);

using MergePlan = std::vector<std::vector<int>>;

// What a run learns of its backward pass: the order the gradient hooks fire (FUSION's rebuild),
// and for MG-WFBP the backward time of every parameter, summed while profiling, then averaged.
struct BackwardProfile {
  std::vector<size_t> hook_order;
  std::vector<double> sums;   // per parameter
  int iterations = 0;         // profiled so far
  std::vector<double> means;  // in hook order, once profiled
  bool plan_ready = false;
};

MergePlan wfbp_plan(int layers);  // one message per layer, L-1 first
MergePlan bsp_plan(int layers);   // one message with everything
// Tensor fusion: layers packed in backward order into messages of at most cap_bytes (the first
// message at most first_cap_bytes); a layer bigger than the cap gets a message of its own.
MergePlan fusion_plan(const std::vector<double>& bytes, double cap_bytes, double first_cap_bytes);
// MG-WFBP (Shi et al.): walk l = L-1 .. 1 and merge l into l-1 when l's communication cannot
// finish before l-1's gradient is ready and either (a) it has not started by then or (b) it
// started less than alpha + gamma earlier (merging saves one start-up on the link and, with
// gamma > 0, one message's worth of stolen compute); recompute the start times after each
// merge. With gamma = 0 this is the paper's rule exactly.
MergePlan mgwfbp_plan(const std::vector<double>& backward_seconds, const std::vector<double>& bytes,
                      const LinkCost& cost);
// When the last message of `plan` ends: backward from time 0, each message after its last
// gradient and after the message before it (one link, FIFO), T(M) = alpha + beta M each; a
// message sent while backward runs delays the rest of backward by gamma.
double plan_comm_end(const std::vector<double>& backward_seconds, const std::vector<double>& bytes,
                     const MergePlan& plan, const LinkCost& cost);
// MG-WFBP as the synchronizer runs it. The greedy rule walks one pair of layers at a time, and
// where every layer's backward is shorter than alpha + gamma it merges everything into one
// message, although sending the last layers' gradients early is faster. So the greedy plan is
// compared with WFBP, one message and byte-capped buckets (caps doubling from the smallest
// gradient to the whole) by plan_comm_end, and another plan replaces it only when more than
// kPlanMargin faster.
constexpr double kPlanMargin = 0.02;
MergePlan mgwfbp_best_plan(const std::vector<double>& backward_seconds, const std::vector<double>& bytes,
                           const LinkCost& cost);

std::string plan_str(const MergePlan& plan);  // e.g. "[7 6] [5 4 3] [2 1 0]"

}  // namespace mt::dist
