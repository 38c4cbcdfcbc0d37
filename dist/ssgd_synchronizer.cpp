#include "dist/ssgd_synchronizer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <ostream>

#include "core/error.h"
#include "dist/compressing_hook.h"
#include "dist/compression_config.h"
#include "dist/dist_config.h"
#include "dist/hierarchical_group.h"
#include "dist/registry.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

using Clock = std::chrono::steady_clock;


std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g MB", bytes / (1 << 20));
  return buf;
}

}  // namespace

SsgdSynchronizer::SsgdSynchronizer(std::shared_ptr<ProcessGroup> group, SsgdOptions options,
                                   std::unique_ptr<CommHook> hook)
    : group_(std::move(group)), options_(std::move(options)), hook_(std::move(hook)) {
  MT_CHECK(group_ != nullptr, "S-SGD needs a process group");
  if (!hook_) hook_ = make_allreduce_hook(group_);
  MT_CHECK(options_.grad_accumulation_steps >= 1, "dist.grad_accumulation_steps must be >= 1, got ",
           options_.grad_accumulation_steps);
  MT_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
           "dist.ssgd.bucket_cap_mb and dist.ssgd.first_bucket_cap_mb must be > 0");
  MT_CHECK(options_.profile_iters >= 1, "dist.ssgd.profile_iters must be >= 1, got ", options_.profile_iters);
  MT_CHECK(options_.gamma >= 0, "dist.ssgd.gamma must be >= 0 seconds per message, got ", options_.gamma);
  if (options_.alpha >= 0 && options_.beta >= 0) cost_ = {options_.alpha, options_.beta, options_.gamma};
}

void SsgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  backward_marks_ = std::make_unique<core::DeviceMarks>(params_.empty() ? core::Device::cpu() : params_[0].device());
  // The parameters' names, for messages (the optimizer holds the model's parameters in order).
  const auto named = model.named_parameters();
  param_names_.clear();
  if (named.size() == params_.size()) {
    for (const auto& [name, tensor] : named) param_names_.push_back(name);
  }
  // Agreement first: the broadcasts below have model-dependent sizes and would fail obscurely
  // (or hang) on ranks with another model.
  check_replicas_agree(*group_, model, options_.config_text);
  broadcast_parameters(*group_, model);
  broadcast_buffers(*group_, model);

  // Until a backward pass has shown the real hook order, assume reverse registration order
  // (true for sequential models: the last layer's gradients come first).
  const size_t P = params_.size();
  std::vector<size_t> reverse(P);
  for (size_t i = 0; i < P; ++i) reverse[i] = P - 1 - i;
  std::vector<std::vector<size_t>> groups;
  if (options_.schedule == Schedule::BSP || options_.schedule == Schedule::MGWFBP) {
    groups.push_back(reverse);  // MGWFBP: until its plan exists
  } else if (options_.schedule == Schedule::FUSION) {
    hook_order_ = reverse;
    groups = compute_groups();
  } else {  // WFBP
    for (size_t p : reverse) groups.push_back({p});
  }
  if (P > 0) build_buckets(groups);

  const bool cost_given = options_.alpha >= 0 && options_.beta >= 0;
  if (options_.schedule == Schedule::MGWFBP && !cost_given) {
    // Timed allreduces of several sizes, alpha and beta fitted (every rank ends with rank 0's).
    cost_ = measure_link_cost(*group_, params_.empty() ? core::Device::cpu() : params_[0].device());
  }
  if (rank() == 0 && options_.log && !hook_->name().empty())
    *options_.log << "S-SGD " << schedule_name(options_.schedule) << ": each bucket travels as " << hook_->name() << '\n';
  if (options_.schedule == Schedule::MGWFBP && rank() == 0 && options_.log) {
    std::ostream& log = *options_.log;
    log << "MG-WFBP: T(M) = alpha + beta*M with alpha " << cost_.alpha * 1e6 << " us, beta "
        << cost_.beta * 1e9 * 1024 * 1024 / 1e6 << " ms/MB";
    if (cost_.gamma > 0) log << ", gamma " << cost_.gamma * 1e6 << " us of compute per message (shared cores)";
    log << (cost_given ? std::string(" (from the config)") : std::string(" (fitted at start-up)"))
        << "; profiling " << options_.profile_iters << " iterations (as BSP meanwhile)" << std::endl;
  }
  Synchronizer::setup(model, optimizer);  // grad-ready hooks -> on_gradient_ready
  set_up_ = true;
  if (pending_state_) {
    const core::StateDict state = std::move(*pending_state_);
    pending_state_.reset();
    restore_state(state);
  }
}

void SsgdSynchronizer::build_buckets(const std::vector<std::vector<size_t>>& groups) {
  buckets_.clear();
  bucket_of_.assign(params_.size(), -1);
  for (const auto& g : groups) {
    for (size_t p : g) bucket_of_.at(p) = static_cast<int>(buckets_.size());
    buckets_.emplace_back(g, params_);
  }
  for (size_t p = 0; p < params_.size(); ++p)
    MT_CHECK(bucket_of_[p] >= 0, "internal: parameter ", p, " is in no bucket");
  launch_order_.clear();
  next_launch_ = 0;
  hook_->set_layout(groups, params_);
}

GradBucket SsgdSynchronizer::grad_bucket(size_t b) const {
  GradBucket out;
  out.index = b;
  out.grad = buckets_[b].payload(params_);
  for (size_t p : buckets_[b].params()) out.params.push_back(params_[p]);
  return out;
}

void SsgdSynchronizer::note_unused(const std::vector<size_t>& unused) {
  ++iterations_with_unused_;
  if (iterations_with_unused_ > 1) return;  // once a run: the reason does not change
  std::string names;
  for (size_t i = 0; i < unused.size() && i < 8; ++i) {
    names += (i ? ", " : "") + (unused[i] < param_names_.size() ? param_names_[unused[i]] : "#" + std::to_string(unused[i]));
  }
  if (unused.size() > 8) names += ", ... (" + std::to_string(unused.size()) + " in all)";
  std::fprintf(stderr,
               "mintrain: note: rank %d: %s got no gradient in iteration %lld; they count as zero in the "
               "average (as PyTorch DDP's find_unused_parameters), and the buckets from theirs on wait for "
               "the end of backward on every rank\n",
               rank(), names.c_str(), static_cast<long long>(iteration_));
}

void SsgdSynchronizer::begin_iteration(int64_t iteration) {
  if (iteration != iteration_) {
    iteration_ = iteration;
    micro_batch_ = 0;
  } else {
    ++micro_batch_;
  }
  const int k = options_.grad_accumulation_steps;
  communicate_ = micro_batch_ % k == k - 1;
}

void SsgdSynchronizer::on_gradient_ready(size_t param_index, core::Tensor& param) {
  if (!communicate_) return;  // an earlier micro-batch: gradients just accumulate locally
  arrivals_.push_back(param_index);
  // MG-WFBP while it profiles: a mark in the device's queue (on a GPU the kernels' time, not
  // the launches'); BSP and the profiling iterations send everything after backward.
  const bool profiling = options_.schedule == Schedule::MGWFBP && !plan_ready_;
  if (profiling) backward_marks_->mark();
  if (options_.schedule == Schedule::BSP || profiling) return;
  const int b = bucket_of_.at(param_index);
  if (buckets_[b].add(param_index, param.grad())) launch_ready_in_order();
  if (options_.timeline) poll_completions();
}

// Buckets go out strictly in bucket order, as PyTorch DDP's reducer does: bucket b only after
// buckets 0..b-1. Every rank then issues the same collectives in the same order, also when a
// parameter gets no gradient on some ranks (its bucket, and the ones after it, wait for the
// step instead of going out in a rank-dependent order: mismatched collectives hang or mix up
// sums). The buckets follow the hook order, so normally nothing waits.
void SsgdSynchronizer::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending() == 0) launch(next_launch_++);
}

void SsgdSynchronizer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  bucket.launched = true;
  bucket.launched_at = Clock::now();
  bucket.work = hook_->send(grad_bucket(b));
  launch_order_.push_back(b);
}

// Notes when messages finish (for the timeline): the group's Work has no callback, so the
// completion time is when we first see it done; checked at every hook and while waiting.
void SsgdSynchronizer::poll_completions() {
  for (size_t b : launch_order_) {
    Bucket& bucket = buckets_[b];
    if (bucket.completion_seen) continue;
    if (!bucket.work->is_completed()) break;  // FIFO: later messages are not done either
    bucket.completion_seen = true;
    bucket.completed_at = Clock::now();
  }
}

void SsgdSynchronizer::wait_all() {
  const auto wait_start = Clock::now();
  Clock::time_point link_free = Clock::time_point::min();
  for (size_t b : launch_order_) {
    Bucket& bucket = buckets_[b];
    hook_->finish(grad_bucket(b));  // waits, leaves the average in the payload
    if (!bucket.completion_seen) {
      bucket.completion_seen = true;
      bucket.completed_at = Clock::now();
    }
    bucket.write_back(params_);
    if (options_.timeline) {
      // One link, FIFO: a message starts when it was enqueued and the previous one finished.
      const auto start = std::max(bucket.launched_at, link_free);
      options_.timeline->add("allreduce b" + std::to_string(b), Timeline::kComm, start,
                             bucket.completed_at,
                             "{\"tensors\":" + std::to_string(bucket.params().size()) +
                                 ",\"bytes\":" + std::to_string(bucket.bytes()) + "}");
      link_free = bucket.completed_at;
    }
  }
  if (options_.timeline) options_.timeline->add("wait", Timeline::kCompute, wait_start, Clock::now());
}

void SsgdSynchronizer::step(optim::Optimizer& optimizer) {
  MT_CHECK(communicate_, "rank ", rank(), ": step() on micro-batch ", micro_batch_ + 1, " of ",
           options_.grad_accumulation_steps,
           "; with dist.grad_accumulation_steps = k, call begin_iteration(it) before each of the k "
           "micro-batches and step() once after the last");
  // Buckets not sent yet (BSP: all of them; otherwise those of parameters unused this
  // iteration and the ones after them) go now, in bucket order, the same on every rank. An
  // unused parameter counts as a zero gradient, as with PyTorch DDP's find_unused_parameters.
  std::vector<size_t> unused;
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    const std::vector<size_t> missing = buckets_[next_launch_].add_missing(params_);
    unused.insert(unused.end(), missing.begin(), missing.end());
    launch(next_launch_);
  }
  if (!unused.empty() && options_.schedule != Schedule::BSP && !(options_.schedule == Schedule::MGWFBP && !plan_ready_))
    note_unused(unused);
  wait_all();
  hook_->end_iteration();
  ++communicated_iters_;
  if (arrivals_.size() == params_.size()) hook_order_ = arrivals_;

  if ((options_.schedule == Schedule::FUSION || options_.schedule == Schedule::WFBP) && communicated_iters_ == 1) {
    // The buckets, rebuilt in the order the hooks really fire (buckets go out in bucket
    // order, so a wrong guess of the first iteration would hold messages back).
    adopt_plan_from_rank0();
  } else if (options_.schedule == Schedule::MGWFBP && !plan_ready_ && communicated_iters_ >= 2) {
    // Profile (the first iteration is a warm-up: allocations, caches): the backward time of a
    // parameter is the time since the previous grad-ready hook.
    if (tb_sum_.empty()) tb_sum_.assign(params_.size(), 0.0);
    const std::vector<double> between = backward_marks_->intervals();  // one fewer than arrivals_
    for (size_t k = 1; k < arrivals_.size() && k - 1 < between.size(); ++k) tb_sum_[arrivals_[k]] += between[k - 1];
    if (++profiled_ == options_.profile_iters) {
      profiled_tb_.clear();
      for (size_t p : hook_order_) profiled_tb_.push_back(tb_sum_[p] / profiled_);
      adopt_plan_from_rank0();
      plan_ready_ = true;
    }
  }

  {
    TimelineSpan span(options_.timeline.get(), "optimizer");
    optimizer.step();
  }
  for (auto& bucket : buckets_) bucket.reset();
  launch_order_.clear();
  next_launch_ = 0;
  arrivals_.clear();
  backward_marks_->clear();
}

std::vector<std::vector<size_t>> SsgdSynchronizer::compute_groups() const {
  // Positions in hook order; parameters that never fired (unused) go last.
  std::vector<size_t> order = hook_order_;
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
    if (pos < static_cast<int>(profiled_tb_.size())) tb[L - 1 - pos] = profiled_tb_[pos];
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
      tb[P - 1 - pos] = pos < profiled_tb_.size() ? profiled_tb_[pos] : 0.0;
      bytes[P - 1 - pos] = static_cast<double>(params_[hook_order_.size() == P ? hook_order_[pos] : P - 1 - pos].numel()) * 4.0;
      total_tb += tb[P - 1 - pos];
    }
    const int L = static_cast<int>(P);
    *options_.log << "MG-WFBP plan after " << profiled_ << " profiled iterations: " << P
                  << " gradients in " << groups.size() << " messages (sizes";
    for (const auto& b : buckets_) *options_.log << " " << mb(b.bytes());
    *options_.log << "); profiled backward " << total_tb * 1e3 << " ms; predicted backward+communication: WFBP "
                  << plan_comm_end(tb, bytes, wfbp_plan(L), cost_) * 1e3 << " ms, MG-WFBP "
                  << plan_comm_end(tb, bytes, mgwfbp_best_plan(tb, bytes, cost_), cost_) * 1e3 << " ms" << std::endl;
  }
}

void SsgdSynchronizer::prepare_eval(layers::Module& model) {
  // Batch-norm statistics are updated locally on each rank's shard; evaluation and checkpoints
  // use rank 0's, so every rank evaluates the same model.
  broadcast_buffers(*group_, model);
}

void SsgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  hook_->prepare_checkpoint();
}

namespace {

void validate_ssgd(const mintrain::DistConfig& d) {
  const mintrain::SsgdConfig& s = d.ssgd();
  check_name("dist.ssgd.schedule", s.schedule(), schedule_names());
  check_above("dist.ssgd.bucket_cap_mb", s.bucket_cap_mb(), 0.0);
  check_above("dist.ssgd.first_bucket_cap_mb", s.first_bucket_cap_mb(), 0.0);
  check_at_least("dist.ssgd.profile_iters", s.profile_iters(), 1);
  MT_CHECK(s.has_alpha() == s.has_beta(), "set both dist.ssgd.alpha and dist.ssgd.beta (the network cost T(M) = "
           "alpha + beta*M), or neither to measure them at start-up");
  if (s.has_alpha()) {
    check_at_least("dist.ssgd.alpha", s.alpha(), 0.0);
    check_at_least("dist.ssgd.beta", s.beta(), 0.0);
  }
  check_at_least("dist.ssgd.gamma", s.gamma(), 0.0);
  check_name("dist.ssgd.allreduce", s.allreduce(), {"flat", "hierarchical"});
  check_at_least("dist.ssgd.ranks_per_rack", s.ranks_per_rack(), 0);
  for (int r : s.rack()) check_at_least("dist.ssgd.rack values", r, 0);
  MT_CHECK(s.rack().empty() || s.ranks_per_rack() == 0,
           "set dist.ssgd.rack (one id per rank) or dist.ssgd.ranks_per_rack, not both");
  if (s.allreduce() == "hierarchical") {
    MT_CHECK(!s.rack().empty() || s.ranks_per_rack() > 0, "dist.ssgd.allreduce \"hierarchical\" needs the "
             "racks: set dist.ssgd.rack (one id per rank) or dist.ssgd.ranks_per_rack");
    MT_CHECK(d.compressor().type() == "none", "dist.ssgd.allreduce \"hierarchical\" carries uncompressed "
             "gradients only; set dist.compressor.type \"none\" or dist.ssgd.allreduce \"flat\"");
    MT_CHECK(s.hook() == "allreduce", "dist.ssgd.allreduce \"hierarchical\" carries float32 gradients only; "
             "set dist.ssgd.hook \"allreduce\" or dist.ssgd.allreduce \"flat\"");
  }
  validate_compressor(d.compressor());
  check_name("dist.ssgd.hook", s.hook(), comm_hook_names());
  MT_CHECK(s.hook() == "allreduce" || d.compressor().type() == "none", "dist.ssgd.hook \"", s.hook(),
           "\" and dist.compressor.type \"", d.compressor().type(), "\" both say what travels; set one: "
           "the compressor brings its own hook (with error feedback)");
}

// What travels for each bucket: dist.compressor's hook when it compresses, else dist.ssgd.hook.
std::unique_ptr<CommHook> gradient_hook(const AlgorithmContext& c, std::shared_ptr<ProcessGroup> group) {
  if (c.dist.compressor().type() != "none") {
    CompressingHookOptions o;
    o.compression = compression_options(c.dist.compressor());
    o.momentum_correction = momentum_correction_options(c);
    return make_compressing_hook(std::move(group), std::move(o));
  }
  if (c.dist.ssgd().hook() == "fp16") return make_fp16_hook(std::move(group));
  return make_allreduce_hook(std::move(group));
}

// The world, or for dist.ssgd.allreduce "hierarchical" the world with rack-by-rack allreduces.
std::shared_ptr<ProcessGroup> gradient_group(const AlgorithmContext& c) {
  const mintrain::SsgdConfig& s = c.dist.ssgd();
  if (s.allreduce() != "hierarchical") return c.group;
  const std::vector<int> racks = racks_from_config(std::vector<int>(s.rack().begin(), s.rack().end()),
                                                   s.ranks_per_rack(), c.group->size(), "dist.ssgd");
  auto group = std::make_shared<HierarchicalGroup>(c.group, racks,
                                                   std::chrono::seconds(c.dist.timeout_seconds()));
  if (c.log && c.group->rank() == 0) *c.log << "S-SGD: " << group->describe() << '\n';
  return group;
}

std::unique_ptr<Synchronizer> make_ssgd(const AlgorithmContext& c) {
  const mintrain::SsgdConfig& s = c.dist.ssgd();
  SsgdOptions o;
  o.schedule = parse_schedule(s.schedule());
  o.bucket_cap_mb = s.bucket_cap_mb();
  o.first_bucket_cap_mb = s.first_bucket_cap_mb();
  o.profile_iters = s.profile_iters();
  o.alpha = s.has_alpha() ? s.alpha() : -1.0;
  o.beta = s.has_beta() ? s.beta() : -1.0;
  o.gamma = s.gamma();
  o.grad_accumulation_steps = c.dist.grad_accumulation_steps();
  o.config_text = c.config_text;
  o.timeline = c.timeline;
  o.log = c.log;
  std::shared_ptr<ProcessGroup> group = gradient_group(c);
  std::unique_ptr<CommHook> hook = gradient_hook(c, group);
  return std::make_unique<SsgdSynchronizer>(std::move(group), std::move(o), std::move(hook));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(ssgd, mt::dist::validate_ssgd, mt::dist::make_ssgd)
