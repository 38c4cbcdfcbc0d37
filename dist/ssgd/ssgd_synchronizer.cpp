#include "dist/ssgd/ssgd_synchronizer.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "core/error.h"
#include "dist/ssgd/compressing_hook.h"
#include "dist/ssgd/powersgd_hook.h"
#include "dist/compress/compression_config.h"
#include "dist/registry.h"
#include "dist/comm/hierarchical_group.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

SsgdSynchronizer::SsgdSynchronizer(std::shared_ptr<ProcessGroup> group, SsgdOptions options,
                                   std::unique_ptr<CommHook> hook)
    : group_(std::move(group)), options_(std::move(options)), hook_(std::move(hook)) {
  MT_CHECK(group_ != nullptr, "S-SGD needs a process group");
  if (!hook_) hook_ = make_allreduce_hook(group_);
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
  // Agreement first: a broadcast below has model-dependent sizes and would fail obscurely
  // (or hang) on ranks with another model.
  check_replicas_agree(*group_, model, options_.config_text);
  // With hierarchical allreduce the racks are known: a needed broadcast crosses each uplink once.
  const auto* hierarchical = dynamic_cast<const HierarchicalGroup*>(group_.get());
  make_replicas_identical(*group_, model, hierarchical ? hierarchical->rack_of() : std::vector<int>{}, options_.log);

  if (!params_.empty()) build_buckets(initial_groups());
  if (options_.schedule == Schedule::MGWFBP) start_mgwfbp();
  if (rank() == 0 && options_.log && !hook_->name().empty())
    *options_.log << "S-SGD " << schedule_name(options_.schedule) << ": each bucket travels as " << hook_->name() << '\n';
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
               rank(), names.c_str(), static_cast<long long>(micro_batches_.iteration()));
}

void SsgdSynchronizer::begin_iteration(int64_t iteration) {
  micro_batches_.begin(iteration);
}

void SsgdSynchronizer::on_gradient_ready(size_t param_index, core::Tensor& param) {
  if (!micro_batches_.communicate()) return;  // an earlier micro-batch: gradients just accumulate locally
  arrivals_.push_back(param_index);
  // MG-WFBP while it profiles: a mark in the device's queue (on a GPU the kernels' time, not
  // the launches'); BSP and the profiling iterations send everything after backward.
  const bool profiling = options_.schedule == Schedule::MGWFBP && !profile_.plan_ready;
  if (profiling) backward_marks_->mark();
  if (options_.schedule == Schedule::BSP || profiling) return;
  const int b = bucket_of_.at(param_index);
  if (buckets_[b].add(param_index, param.grad())) launch_ready_in_order();
  if (options_.timeline) poll_completions();
}

// Buckets go out strictly in bucket order, as PyTorch DDP's reducer does, so every rank issues
// the same collectives in the same order (mismatched ones hang or mix up sums), also when a
// parameter got no gradient on some rank. The buckets follow the hook order: nothing waits.
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

void SsgdSynchronizer::wait_all() {
  const auto wait_start = Clock::now();
  for (size_t b : launch_order_) {
    Bucket& bucket = buckets_[b];
    hook_->finish(grad_bucket(b));  // waits, leaves the average in the payload
    if (!bucket.completion_seen) {
      bucket.completion_seen = true;
      bucket.completed_at = Clock::now();
    }
    bucket.write_back(params_);
  }
  if (options_.timeline) trace_messages(wait_start);
}

bool SsgdSynchronizer::end_iteration(optim::StepGuard&) {
  micro_batches_.check_step("rank", rank());
  // Buckets not sent yet (BSP: all of them; otherwise those of parameters unused this
  // iteration and the ones after them) go now, in bucket order, the same on every rank. An
  // unused parameter counts as a zero gradient, as with PyTorch DDP's find_unused_parameters.
  std::vector<size_t> unused;
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    const std::vector<size_t> missing = buckets_[next_launch_].add_missing(params_);
    unused.insert(unused.end(), missing.begin(), missing.end());
    launch(next_launch_);
  }
  if (!unused.empty() && options_.schedule != Schedule::BSP && !(options_.schedule == Schedule::MGWFBP && !profile_.plan_ready))
    note_unused(unused);
  wait_all();
  hook_->end_iteration();
  ++communicated_iters_;
  update_layout();  // FUSION's and WFBP's rebuild after the first iteration, MG-WFBP's profile and plan
  for (auto& bucket : buckets_) bucket.reset();
  launch_order_.clear();
  next_launch_ = 0;
  arrivals_.clear();
  backward_marks_->clear();
  return false;  // the trainer steps on the average
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

// The messages of this iteration on the timeline's comm lane, and the wait on the compute lane.
void SsgdSynchronizer::trace_messages(Clock::time_point wait_start) {
  Clock::time_point link_free = Clock::time_point::min();
  for (size_t b : launch_order_) {
    const Bucket& bucket = buckets_[b];
    // One link, FIFO: a message starts when it was enqueued and the previous one finished.
    const auto start = std::max(bucket.launched_at, link_free);
    options_.timeline->add("allreduce b" + std::to_string(b), Timeline::kComm, start, bucket.completed_at,
                           "{\"tensors\":" + std::to_string(bucket.params().size()) +
                               ",\"bytes\":" + std::to_string(bucket.bytes()) + "}");
    link_free = bucket.completed_at;
  }
  options_.timeline->add("wait", Timeline::kCompute, wait_start, Clock::now());
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
  check_at_least("dist.ssgd.powersgd.rank", s.powersgd().rank(), 1);
  check_at_least("dist.ssgd.powersgd.start_iter", s.powersgd().start_iter(), 0);
  check_above("dist.ssgd.powersgd.min_compression_rate", s.powersgd().min_compression_rate(), 0.0);
  validate_compressor(d.compressor());
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
  const mintrain::SsgdConfig& s = c.dist.ssgd();
  if (s.hook() == "fp16") return make_fp16_hook(std::move(group));
  if (s.hook() == "bf16") return make_bf16_hook(std::move(group));
  if (s.hook() == "powersgd")
    return make_powersgd_hook(std::move(group), {.rank = s.powersgd().rank(),
                                                 .start_iter = s.powersgd().start_iter(),
                                                 .min_compression_rate = s.powersgd().min_compression_rate()});
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
  if (c.common.log && c.group->rank() == 0) *c.common.log << "S-SGD: " << group->describe() << '\n';
  return group;
}

std::unique_ptr<Synchronizer> make_ssgd(const AlgorithmContext& c) {
  const mintrain::SsgdConfig& s = c.dist.ssgd();
  auto o = options_from<SsgdOptions>(c);
  o.schedule = parse_schedule(s.schedule());
  o.bucket_cap_mb = s.bucket_cap_mb();
  o.first_bucket_cap_mb = s.first_bucket_cap_mb();
  o.profile_iters = s.profile_iters();
  o.alpha = s.has_alpha() ? s.alpha() : -1.0;
  o.beta = s.has_beta() ? s.beta() : -1.0;
  o.gamma = s.gamma();
  o.grad_accumulation_steps = c.dist.grad_accumulation_steps();
  std::shared_ptr<ProcessGroup> group = gradient_group(c);
  std::unique_ptr<CommHook> hook = gradient_hook(c, group);
  return std::make_unique<SsgdSynchronizer>(std::move(group), std::move(o), std::move(hook));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(ssgd, {.validate = mt::dist::validate_ssgd,
                              .make = mt::dist::make_ssgd,
                              .names = {{"ssgd.schedule", mt::dist::schedule_names()},
                                        {"ssgd.allreduce", {"flat", "hierarchical"}},
                                        {"ssgd.hook", mt::dist::comm_hook_names()},
                                        {"compressor.type", mt::dist::compressor_names()}}})
