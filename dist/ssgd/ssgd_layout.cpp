// Which gradients share a bucket, and how that changes during a run (ssgd_synchronizer.h): the
// initial guess, FUSION's and WFBP's rebuild from the hook order seen in the first iteration,
// MG-WFBP's cost measurement, profile and plan. Rank 0 decides and broadcasts, so every rank
// packs the same buckets. Apart from the communication path in ssgd_synchronizer.cpp.
#include <ostream>

#include "core/error.h"
#include "core/strings.h"
#include "dist/replicas.h"
#include "dist/ssgd/ssgd_synchronizer.h"

namespace mt::dist {
namespace {

std::string mb(double bytes) { return core::formatted("%.3g MB", bytes / (1 << 20)); }

}  // namespace

std::vector<std::vector<size_t>> SsgdSynchronizer::initial_groups() {
  // Until a backward pass has shown the real hook order, assume reverse registration order
  // (true for sequential models: the last layer's gradients come first).
  const size_t P = params_.size();
  std::vector<size_t> reverse(P);
  for (size_t i = 0; i < P; ++i) reverse[i] = P - 1 - i;
  std::vector<std::vector<size_t>> groups;
  if (options_.schedule == Schedule::BSP || options_.schedule == Schedule::MGWFBP) {
    groups.push_back(reverse);  // MGWFBP: until its plan exists
  } else if (options_.schedule == Schedule::FUSION) {
    profile_.hook_order = reverse;
    groups = compute_groups();
  } else {  // WFBP
    for (size_t p : reverse) groups.push_back({p});
  }
  return groups;
}

void SsgdSynchronizer::start_mgwfbp() {
  const bool cost_given = options_.alpha >= 0 && options_.beta >= 0;
  // Timed allreduces of several sizes, alpha and beta fitted (every rank ends with rank 0's); none
  // larger than the whole gradient: no message is, and on a slow link 4 MiB takes seconds.
  double gradient_bytes = 0;
  for (const Tensor& p : params_) gradient_bytes += static_cast<double>(p.nbytes());
  if (!cost_given)
    cost_ = measure_link_cost(*group_, params_.empty() ? core::Device::cpu() : params_[0].device(), gradient_bytes);
  if (rank() != 0 || !options_.log) return;
  std::ostream& log = *options_.log;
  log << "MG-WFBP: T(M) = alpha + beta*M with alpha " << cost_.alpha * 1e6 << " us, beta "
      << cost_.beta * 1e9 * 1024 * 1024 / 1e6 << " ms/MB";
  if (cost_.gamma > 0) log << ", gamma " << cost_.gamma * 1e6 << " us of compute per message (shared cores)";
  log << (cost_given ? std::string(" (from the config)") : std::string(" (fitted at start-up)"))
      << (pending_state_ ? std::string("; restoring its saved plan")
                         : "; profiling " + std::to_string(options_.profile_iters) + " iterations (as BSP meanwhile)")
      << std::endl;
}

void SsgdSynchronizer::update_layout() {
  if (arrivals_.size() == params_.size()) profile_.hook_order = arrivals_;
  if ((options_.schedule == Schedule::FUSION || options_.schedule == Schedule::WFBP) && communicated_iters_ == 1) {
    // The buckets, rebuilt in the order the hooks really fire (buckets go out in bucket
    // order, so a wrong guess of the first iteration would hold messages back).
    adopt_plan_from_rank0();
  } else if (options_.schedule == Schedule::MGWFBP && !profile_.plan_ready && communicated_iters_ >= 2) {
    // Profile (the first iteration is a warm-up: allocations, caches): the backward time of a
    // parameter is the time since the previous grad-ready hook.
    if (profile_.sums.empty()) profile_.sums.assign(params_.size(), 0.0);
    const std::vector<double> between = backward_marks_->intervals();  // one fewer than arrivals_
    for (size_t k = 1; k < arrivals_.size() && k - 1 < between.size(); ++k) profile_.sums[arrivals_[k]] += between[k - 1];
    if (++profile_.iterations == options_.profile_iters) {
      profile_.means.clear();
      for (size_t p : profile_.hook_order) profile_.means.push_back(profile_.sums[p] / profile_.iterations);
      adopt_plan_from_rank0();
      profile_.plan_ready = true;
    }
  }
}

std::vector<std::vector<size_t>> SsgdSynchronizer::compute_groups() const {
  // Positions in hook order; parameters that never fired (unused) go last.
  std::vector<size_t> order = profile_.hook_order;
  std::vector<bool> seen(params_.size(), false);
  for (size_t p : order) seen[p] = true;
  for (size_t p = params_.size(); p-- > 0;)
    if (!seen[p]) order.push_back(p);
  // The cost model numbers layers in forward order (backward runs L-1 .. 0): position pos in
  // hook order is layer L-1-pos.
  const int L = static_cast<int>(order.size());
  std::vector<double> bytes(L), tb(L, 0.0);
  for (int pos = 0; pos < L; ++pos) {
    bytes[L - 1 - pos] = static_cast<double>(params_[order[pos]].numel()) * 4.0;
    if (pos < static_cast<int>(profile_.means.size())) tb[L - 1 - pos] = profile_.means[pos];
  }
  MergePlan plan;
  if (options_.schedule == Schedule::WFBP) {
    plan = wfbp_plan(L);  // a message per parameter, now in the order the hooks really fire
  } else if (options_.schedule == Schedule::MGWFBP) {
    plan = mgwfbp_best_plan(tb, bytes, cost_);
  } else {
    const double MiB = 1024.0 * 1024.0;
    plan = fusion_plan(bytes, options_.bucket_cap_mb * MiB, options_.first_bucket_cap_mb * MiB);
  }
  std::vector<std::vector<size_t>> groups;
  for (const auto& message : plan) {
    groups.emplace_back();
    for (int l : message) groups.back().push_back(order[L - 1 - l]);
  }
  return groups;
}

void SsgdSynchronizer::adopt_plan_from_rank0() {
  const size_t P = params_.size();
  if (P == 0) return;
  // [parameter at position k ..., its group ...], as float32 (exact for these integers).
  Tensor wire = Tensor::zeros({static_cast<int64_t>(2 * P)}, core::DType::Float32,
                              params_[0].device());
  std::vector<std::vector<size_t>> groups;
  if (rank() == 0) {
    groups = compute_groups();
    std::vector<float> host(2 * P);
    size_t k = 0;
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t p : groups[g]) {
        host[k] = static_cast<float>(p);
        host[P + k] = static_cast<float>(g);
        ++k;
      }
    wire.copy_(Tensor::from_vector(host, {static_cast<int64_t>(2 * P)}).to(wire.device()));
  }
  finish(group_->broadcast(wire, 0), *group_, "broadcast of the bucket plan from rank 0");
  const std::vector<float> host = wire.to_vector();
  groups.clear();
  for (size_t k = 0; k < P; ++k) {
    const size_t g = static_cast<size_t>(host[P + k]);
    if (g >= groups.size()) groups.resize(g + 1);
    groups[g].push_back(static_cast<size_t>(host[k]));
  }
  build_buckets(groups);

  if (rank() == 0 && options_.log && options_.schedule == Schedule::MGWFBP) {
    // The plan's inputs in the merge plan's numbering (layer L-1 is the first hook).
    std::vector<double> tb(P, 0.0), bytes(P, 0.0);
    double total_tb = 0;
    for (size_t pos = 0; pos < P; ++pos) {
      tb[P - 1 - pos] = pos < profile_.means.size() ? profile_.means[pos] : 0.0;
      bytes[P - 1 - pos] = static_cast<double>(params_[profile_.hook_order.size() == P ? profile_.hook_order[pos] : P - 1 - pos].numel()) * 4.0;
      total_tb += tb[P - 1 - pos];
    }
    const int L = static_cast<int>(P);
    *options_.log << "MG-WFBP plan after " << profile_.iterations << " profiled iterations: " << P
                  << " gradients in " << groups.size() << " messages (sizes";
    for (const auto& b : buckets_) *options_.log << " " << mb(b.bytes());
    *options_.log << "); profiled backward " << total_tb * 1e3 << " ms; predicted backward+communication: WFBP "
                  << plan_comm_end(tb, bytes, wfbp_plan(L), cost_) * 1e3 << " ms, MG-WFBP "
                  << plan_comm_end(tb, bytes, mgwfbp_best_plan(tb, bytes, cost_), cost_) * 1e3 << " ms" << std::endl;
  }
}

}  // namespace mt::dist
