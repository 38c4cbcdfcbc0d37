#include "dist/ssgd_synchronizer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <ostream>

#include "core/error.h"
#include "dist/compressed_ssgd_synchronizer.h"
#include "dist/dist_config.h"
#include "dist/registry.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g MB", bytes / (1 << 20));
  return buf;
}

// ---- Checkpoint state ----

// Bumped when the meaning of an "ssgd.*" entry changes. The schedule is stored as its Schedule
// enumerator (BSP 0, WFBP 1, FUSION 2, MGWFBP 3).
constexpr int64_t kStateFormat = 1;

Tensor int64_tensor(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

// Tensors have no float64: doubles travel as their bit patterns, so they come back exactly.
Tensor float64_bits_tensor(const std::vector<double>& values) {
  std::vector<int64_t> bits;
  for (double v : values) bits.push_back(std::bit_cast<int64_t>(v));
  return int64_tensor(bits);
}

std::string text_of(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// The "ssgd.*" entries of a checkpoint's synchronizer state, read with checks that name the entry.
class StateReader {
 public:
  explicit StateReader(const core::StateDict& state) {
    for (const auto& [name, t] : state)
      if (name.rfind("ssgd.", 0) == 0) entries_.emplace(name, t);
  }
  bool empty() const { return entries_.empty(); }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }

  // count < 0: any number of values.
  std::vector<int64_t> ints(const std::string& name, int64_t count) const {
    const auto it = entries_.find(name);
    MT_CHECK(it != entries_.end(), "checkpoint entry sync.", name,
             " is missing: the S-SGD state is incomplete (a damaged checkpoint?)");
    const Tensor t = it->second.to(core::Device::cpu()).contiguous();
    MT_CHECK(t.dtype() == core::DType::Int64 && (count < 0 || t.numel() == count), "checkpoint entry sync.",
             name, " must hold ", count < 0 ? std::string("int64 values") : std::to_string(count) + " int64 values",
             ", got ", t.str());
    const int64_t* data = t.data<int64_t>();
    return std::vector<int64_t>(data, data + t.numel());
  }

  std::vector<double> doubles(const std::string& name, int64_t count) const {
    std::vector<double> out;
    for (int64_t bits : ints(name, count)) out.push_back(std::bit_cast<double>(bits));
    return out;
  }

 private:
  std::map<std::string, Tensor> entries_;
};

}  // namespace

SsgdSynchronizer::SsgdSynchronizer(std::shared_ptr<ProcessGroup> group, SsgdOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  MT_CHECK(group_ != nullptr, "S-SGD needs a process group");
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
  if (options_.schedule == Schedule::MGWFBP && rank() == 0 && options_.log) {
    *options_.log << "MG-WFBP: T(M) = alpha + beta*M with alpha " << cost_.alpha * 1e6 << " us, beta "
                  << cost_.beta * 1e9 * 1024 * 1024 / 1e6 << " ms/MB"
                  << (cost_.gamma > 0 ? ", gamma " + text_of(cost_.gamma * 1e6) + " us of compute per message (shared cores)"
                                      : std::string())
                  << (cost_given ? std::string(" (from the config)") : std::string(" (fitted at start-up)"))
                  << "; profiling " << options_.profile_iters << " iterations (as BSP meanwhile)"
                  << std::endl;
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
  arrival_times_.push_back(Clock::now());
  // BSP, and MG-WFBP while it profiles: everything goes after backward.
  if (options_.schedule == Schedule::BSP || (options_.schedule == Schedule::MGWFBP && !plan_ready_)) return;
  const int b = bucket_of_.at(param_index);
  if (buckets_[b].add(param_index, param.grad())) launch(b);
  if (options_.timeline) poll_completions();
}

void SsgdSynchronizer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  bucket.launched = true;
  bucket.launched_at = Clock::now();
  Tensor payload = bucket.payload(params_);
  bucket.work = group_->allreduce(payload, ReduceOp::Sum);
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
  const float scale = 1.0f / static_cast<float>(world_size());
  Clock::time_point link_free = Clock::time_point::min();
  for (size_t b : launch_order_) {
    Bucket& bucket = buckets_[b];
    finish(bucket.work, *group_,
           "allreduce of gradient bucket " + std::to_string(b) + " (" +
               std::to_string(bucket.params().size()) + " tensors, " + mb(bucket.bytes()) + ")");
    if (!bucket.completion_seen) {
      bucket.completion_seen = true;
      bucket.completed_at = Clock::now();
    }
    bucket.finish(params_, scale);
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
  // Buckets still waiting for a gradient (BSP: all of them; otherwise buckets of parameters
  // unused this iteration) go now, in bucket order, the same on every rank.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].launched) continue;
    buckets_[b].add_missing(params_);
    launch(b);
  }
  wait_all();
  ++communicated_iters_;
  if (arrivals_.size() == params_.size()) hook_order_ = arrivals_;

  if (options_.schedule == Schedule::FUSION && communicated_iters_ == 1) {
    adopt_plan_from_rank0();  // the buckets, rebuilt in the order the hooks really fire
  } else if (options_.schedule == Schedule::MGWFBP && !plan_ready_ && communicated_iters_ >= 2) {
    // Profile (the first iteration is a warm-up: allocations, caches): the backward time of a
    // parameter is the time since the previous grad-ready hook.
    if (tb_sum_.empty()) tb_sum_.assign(params_.size(), 0.0);
    for (size_t k = 1; k < arrivals_.size(); ++k)
      tb_sum_[arrivals_[k]] += secs(arrival_times_[k] - arrival_times_[k - 1]);
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
  arrivals_.clear();
  arrival_times_.clear();
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
  if (options_.schedule == Schedule::MGWFBP) {
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

core::StateDict SsgdSynchronizer::state_dict() const {
  const size_t P = params_.size();
  if (P == 0) return {};  // not set up (or nothing to train): no decision made yet
  std::vector<int64_t> numel, layout(2 * P);
  for (const auto& p : params_) numel.push_back(p.numel());
  // The same shape as the plan broadcast: [parameter at position k ..., its bucket ...].
  size_t k = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t p : buckets_[b].params()) {
      layout[k] = static_cast<int64_t>(p);
      layout[P + k] = static_cast<int64_t>(b);
      ++k;
    }
  core::StateDict state = {
      {"ssgd.format", int64_tensor({kStateFormat})},
      {"ssgd.settings",
       int64_tensor({static_cast<int64_t>(options_.schedule), world_size(), options_.profile_iters,
                     std::bit_cast<int64_t>(options_.bucket_cap_mb),
                     std::bit_cast<int64_t>(options_.first_bucket_cap_mb),
                     std::bit_cast<int64_t>(options_.alpha), std::bit_cast<int64_t>(options_.beta)})},
      {"ssgd.param_numel", int64_tensor(numel)},
      {"ssgd.buckets", int64_tensor(layout)},
      {"ssgd.progress", int64_tensor({communicated_iters_, profiled_, plan_ready_ ? 1 : 0})},
      {"ssgd.cost", float64_bits_tensor({cost_.alpha, cost_.beta, cost_.gamma})},
  };
  if (!hook_order_.empty())
    state.emplace_back("ssgd.hook_order", int64_tensor(std::vector<int64_t>(hook_order_.begin(), hook_order_.end())));
  if (!tb_sum_.empty()) state.emplace_back("ssgd.backward_sums", float64_bits_tensor(tb_sum_));
  if (!profiled_tb_.empty()) state.emplace_back("ssgd.backward_means", float64_bits_tensor(profiled_tb_));
  return state;
}

void SsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  if (!set_up_) {
    pending_state_ = state;  // the layout needs the parameters, which setup brings
    return;
  }
  restore_state(state);
}

void SsgdSynchronizer::note(const std::string& text) const {
  if (rank() == 0 && options_.log) *options_.log << "note: " << text << std::endl;
}

void SsgdSynchronizer::restore_state(const core::StateDict& state) {
  const StateReader in(state);
  const bool layout_evolves = options_.schedule == Schedule::FUSION || options_.schedule == Schedule::MGWFBP;
  if (in.empty()) {
    if (layout_evolves) {
      note("the checkpoint holds no S-SGD bucket state (written by another algorithm or an older "
           "build): " + name() + " starts from its initial bucket layout as a new run does, so the "
           "weights may differ in the last bits from a run that never stopped");
    }
    return;
  }
  const size_t P = params_.size();
  const int64_t format = in.ints("ssgd.format", 1)[0];
  MT_CHECK(format == kStateFormat, "checkpoint entry sync.ssgd.format is ", format,
           "; this build reads S-SGD state format ", kStateFormat);
  const std::vector<int64_t> numel = in.ints("ssgd.param_numel", -1);
  MT_CHECK(numel.size() == P, "the checkpoint's S-SGD state (sync.ssgd.param_numel) is for a model of ",
           numel.size(), " parameters, this model has ", P,
           "; resume with the model the checkpoint was written with");
  for (size_t p = 0; p < P; ++p) {
    MT_CHECK(numel[p] == params_[p].numel(), "the checkpoint's S-SGD state (sync.ssgd.param_numel) gives "
             "parameter ", p, " ", numel[p], " elements, this model's has ", params_[p].numel(),
             "; resume with the model the checkpoint was written with");
  }

  // Settings that shaped the layout: when one differs the saved layout answers another question,
  // so start afresh (a legitimate change of config, not an error).
  const std::vector<int64_t> settings = in.ints("ssgd.settings", 7);
  MT_CHECK(settings[0] >= 0 && settings[0] <= static_cast<int64_t>(Schedule::MGWFBP),
           "checkpoint entry sync.ssgd.settings names schedule ", settings[0], ", which is no S-SGD schedule");
  const auto saved_schedule = static_cast<Schedule>(settings[0]);
  const double saved_cap = std::bit_cast<double>(settings[3]), saved_first_cap = std::bit_cast<double>(settings[4]);
  const double saved_alpha = std::bit_cast<double>(settings[5]), saved_beta = std::bit_cast<double>(settings[6]);
  std::vector<std::string> differ;
  if (saved_schedule != options_.schedule) {
    differ.push_back("dist.schedule " + schedule_name(saved_schedule));
  } else if (options_.schedule == Schedule::FUSION) {
    if (saved_cap != options_.bucket_cap_mb) differ.push_back("dist.bucket_cap_mb " + text_of(saved_cap));
    if (saved_first_cap != options_.first_bucket_cap_mb)
      differ.push_back("dist.first_bucket_cap_mb " + text_of(saved_first_cap));
  } else if (options_.schedule == Schedule::MGWFBP) {
    // The plan comes from timings on that many ranks with that cost model.
    if (settings[1] != world_size()) differ.push_back(std::to_string(settings[1]) + " ranks");
    if (settings[2] != options_.profile_iters) differ.push_back("dist.profile_iters " + std::to_string(settings[2]));
    auto given = [](double v) { return v >= 0 ? text_of(v) : std::string("measured"); };
    if (saved_alpha != options_.alpha) differ.push_back("dist.alpha " + given(saved_alpha));
    if (saved_beta != options_.beta) differ.push_back("dist.beta " + given(saved_beta));
  }
  if (!differ.empty()) {
    std::string what;
    for (const auto& d : differ) what += (what.empty() ? "" : ", ") + d;
    note("the checkpoint's S-SGD buckets were made with " + what + " (this run: " + name() +
         "): starting the buckets afresh as a new run does, so the weights may differ in the last "
         "bits from a run that never stopped");
    return;
  }

  // The layout: every parameter exactly once, buckets numbered 0, 1, ... in launch order.
  const std::vector<int64_t> layout = in.ints("ssgd.buckets", static_cast<int64_t>(2 * P));
  std::vector<std::vector<size_t>> groups;
  std::vector<bool> placed(P, false);
  for (size_t k = 0; k < P; ++k) {
    const int64_t p = layout[k], b = layout[P + k];
    MT_CHECK(p >= 0 && p < static_cast<int64_t>(P) && !placed[p], "checkpoint entry sync.ssgd.buckets: "
             "position ", k, " holds parameter ", p, ", which is out of range or appears twice");
    MT_CHECK(b == static_cast<int64_t>(groups.size()) - 1 || b == static_cast<int64_t>(groups.size()),
             "checkpoint entry sync.ssgd.buckets: position ", k, " is in bucket ", b,
             "; buckets must be numbered 0, 1, ... in order");
    if (b == static_cast<int64_t>(groups.size())) groups.emplace_back();
    groups.back().push_back(static_cast<size_t>(p));
    placed[p] = true;
  }
  const std::vector<int64_t> progress = in.ints("ssgd.progress", 3);
  MT_CHECK(progress[0] >= 0 && progress[1] >= 0 && (progress[2] == 0 || progress[2] == 1),
           "checkpoint entry sync.ssgd.progress holds impossible counts (", progress[0], ", ", progress[1],
           ", ", progress[2], ")");
  // alpha, beta, gamma; older checkpoints hold two, or a fourth number (a share of compute lost
  // while a message flies, which training no longer models) and a measured curve (ignored).
  const std::vector<double> cost = in.doubles("ssgd.cost", -1);
  MT_CHECK(cost.size() >= 2 && cost.size() <= 4, "checkpoint entry sync.ssgd.cost must hold 2 to 4 values, got ",
           cost.size());
  const LinkCost restored{cost[0], cost[1], cost.size() >= 3 ? cost[2] : 0.0};
  std::vector<size_t> hook_order;
  if (in.has("ssgd.hook_order")) {
    std::vector<bool> seen(P, false);
    for (int64_t p : in.ints("ssgd.hook_order", static_cast<int64_t>(P))) {
      MT_CHECK(p >= 0 && p < static_cast<int64_t>(P) && !seen[p], "checkpoint entry sync.ssgd.hook_order "
               "holds parameter ", p, ", which is out of range or appears twice");
      seen[p] = true;
      hook_order.push_back(static_cast<size_t>(p));
    }
  }
  std::vector<double> tb_sum, profiled_tb;
  if (in.has("ssgd.backward_sums")) tb_sum = in.doubles("ssgd.backward_sums", static_cast<int64_t>(P));
  if (in.has("ssgd.backward_means")) profiled_tb = in.doubles("ssgd.backward_means", static_cast<int64_t>(P));

  // Everything checked: adopt it.
  build_buckets(groups);
  communicated_iters_ = progress[0];
  profiled_ = static_cast<int>(progress[1]);
  plan_ready_ = progress[2] == 1;
  cost_ = restored;
  hook_order_ = std::move(hook_order);
  tb_sum_ = std::move(tb_sum);
  profiled_tb_ = std::move(profiled_tb);
}

void SsgdSynchronizer::prepare_eval(layers::Module& model) {
  // Batch-norm statistics are updated locally on each rank's shard; evaluation and checkpoints
  // use rank 0's, so every rank evaluates the same model.
  broadcast_buffers(*group_, model);
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
  validate_compressor(d.compressor());
}

std::unique_ptr<Synchronizer> make_ssgd(const AlgorithmContext& c) {
  if (c.dist.compressor().type() != "none") return make_compressed_ssgd(c);
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
  return std::make_unique<SsgdSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(ssgd, mt::dist::validate_ssgd, mt::dist::make_ssgd)
