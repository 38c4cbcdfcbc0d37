#include "dist/auto/auto_synchronizer.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <ostream>
#include <sstream>

#include "core/strings.h"
#include "dist/comm/hierarchical_group.h"
#include "dist/comm/topology.h"
#include "dist/predict/model_profile.h"

namespace mt::dist {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string ms(double seconds) { return seconds < 0 ? "-" : core::formatted("%.1f ms", seconds * 1e3); }

constexpr double kFarOff = 1.5;  // a trial this much slower than another's time ends early

}  // namespace

std::string AutoDecision::describe() const {
  std::ostringstream s;
  s << "auto at iteration " << iteration << " (" << reason << "): " << names[winner]
    << (measured[winner] >= 0 ? " measured fastest" : " predicted fastest, not tried")
    << (rounds > 1 ? " (the trials took turns in " + std::to_string(rounds) + " rounds)" : "") << "\n";
  s << "  candidate              predicted    measured  iterations\n";
  for (size_t i = 0; i < names.size(); ++i)
    s << core::formatted("  %-20s %11s %11s %11s%s\n", names[i].c_str(), ms(predicted[i]).c_str(), ms(measured[i]).c_str(),
                         timed[i] > 0 ? std::to_string(timed[i]).c_str() : "-", i == winner ? "  <- chosen" : "");
  return s.str();
}

std::string AutoDecision::json() const {
  std::ostringstream s;
  s << "{\"iteration\":" << iteration << ",\"reason\":\"" << reason << "\",\"winner\":\"" << names[winner]
    << "\",\"rounds\":" << rounds << ",\"candidates\":[";
  for (size_t i = 0; i < names.size(); ++i) {
    s << (i ? "," : "") << "{\"name\":\"" << names[i] << "\",\"predicted_s\":" << predicted[i] << ",\"measured_s\":";
    if (measured[i] >= 0) s << measured[i]; else s << "null";
    s << ",\"timed_iterations\":" << timed[i] << "}";
  }
  return s.str() + "]}";
}

int64_t iterations_to_try_all(const mintrain::DistConfig& dist, bool clips_gradients, int servers) {
  // The profile's first iteration is not timed, and an iteration's time is known when the next
  // one begins: two more than the phases' own lengths.
  int64_t total = 2 + dist.auto_().profile_iters();
  for (const Candidate& c : candidates_for(dist, clips_gradients, servers)) total += c.warmup_iters + dist.auto_().trial_iters();
  return total;
}

AutoSynchronizer::AutoSynchronizer(std::shared_ptr<ProcessGroup> group, mintrain::DistConfig dist,
                                   mintrain::OptimizerConfig optimizer, int64_t batch_size, AutoOptions options,
                                   std::shared_ptr<ProcessGroup> world_with_servers)
    : group_(std::move(group)),
      dist_(std::move(dist)),
      optimizer_config_(std::move(optimizer)),
      batch_size_(batch_size),
      clips_(optimizer_config_.max_grad_norm() > 0),
      options_(std::move(options)),
      world_with_servers_(std::move(world_with_servers)),
      drift_(options_.drift_share, options_.drift_window, options_.max_redecisions) {
  if (world_with_servers_) session_ = std::make_unique<ServerSession>(group_, world_with_servers_);
  candidates_for(dist_, clips_, servers());  // an unknown candidate fails before any collective
}

AutoSynchronizer::~AutoSynchronizer() {
  if (model_)
    for (const Tensor& p : optimizer_->params()) p.clear_grad_hooks();  // they point at current_
  current_.reset();  // a parameter-server candidate tells its servers to stop serving it
  if (session_ && !failed_) session_->end();
}

template <typename F>
auto AutoSynchronizer::failing(F&& f) {
  try {
    return f();
  } catch (...) {
    failed_ = true;
    throw;
  }
}

std::string AutoSynchronizer::name() const { return "auto(" + in_use_.name + ")"; }

void AutoSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  model_ = &model;
  optimizer_ = &optimizer;
  backward_.assign(optimizer.params().size(), 0.0);
  ready_.assign(optimizer.params().size(), {});
  if (options_.log && group_->rank() == 0)
    *options_.log << "auto: profiling " << options_.profile_iters << " iterations as S-SGD BSP, then trying "
                  << (options_.trials > 0 ? "the best " + std::to_string(options_.trials) + " and each family's best of " : "all ")
                  << candidates_for(dist_, clips_, servers()).size() << " candidates as the cost model ranks them, "
                  << options_.trial_iters << " iterations each" << std::endl;
  switch_to(profiling_candidate());
}

// S-SGD BSP, named or not: nothing travels during backward, so the gaps are backward's alone.
Candidate AutoSynchronizer::profiling_candidate() const {
  mintrain::DistConfig all = dist_;
  all.mutable_auto_()->clear_candidates();
  return candidates_for(all, clips_, servers()).front();
}

void AutoSynchronizer::retire_current() {
  if (!current_) return;
  for (const Tensor& p : optimizer_->params()) p.clear_grad_hooks();
  // Rank 0's batch-norm statistics everywhere (the parameters are equal already), so the next
  // synchronizer's start-up check finds identical replicas and broadcasts nothing.
  current_->prepare_eval(*model_);
  current_.reset();  // finishes what is in flight
}

void AutoSynchronizer::switch_to(const Candidate& candidate, const core::StateDict& state) {
  retire_current();
  // On servers: a session of theirs, with partition ids (so tags) of its own (registry.h).
  constexpr int64_t kIdsPerSession = 1 << 20;
  const int64_t served = candidate.served_partition_bytes;
  const AlgorithmContext context{group_, candidate.dist, optimizer_config_, options_,
                                 served ? world_with_servers_ : nullptr, batch_size_, kIdsPerSession * ps_sessions_};
  if (served) {
    MT_CHECK(ps_sessions_ < 1000, "auto: more than 1000 parameter-server sessions would run out of tags");
    session_->serve(served);
    ++ps_sessions_;
  }
  current_ = find_algorithm(candidate.dist.algorithm()).make(context);
  if (!state.empty()) current_->load_state_dict(state);  // applied at the end of setup
  failing([&] { current_->setup(*model_, *optimizer_); });
  in_use_ = candidate;
  time_gradients();
}

void AutoSynchronizer::time_gradients() {
  const auto& params = optimizer_->params();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].register_grad_ready_hook([this, i](core::Tensor&) {
      if (phase_ == Phase::Profile) ready_[i] = Clock::now();
    });
}

void AutoSynchronizer::begin_iteration(int64_t iteration) {
  const Clock::time_point now = Clock::now();
  if (iteration != iteration_) {
    if (iteration_ >= 0 && !untimed_) {
      if (phase_ == Phase::Profile && profiled_ > 0) update_ += seconds_between(ended_, now);
      failing([&] { iteration_done(seconds_between(began_, now)); });
    }
    if (session_ && !in_use_.served_partition_bytes) failing([&] { session_->keep_alive(); });
    untimed_ = false;
    iteration_ = iteration;
    began_ = Clock::now();  // after a switch: its cost is the trial's warm-up, not this iteration's
  }
  micro_batch_began_ = Clock::now();
  std::fill(ready_.begin(), ready_.end(), Clock::time_point{});
  failing([&] { current_->begin_iteration(iteration); });
}

bool AutoSynchronizer::end_iteration(optim::StepGuard& optimizer) {
  if (phase_ == Phase::Profile && phase_iters_ >= 1) {
    // Backward seconds of each parameter: the gap to the gradient that was ready before it.
    std::vector<size_t> order;
    for (size_t i = 0; i < ready_.size(); ++i)
      if (ready_[i] != Clock::time_point{}) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready_[a] < ready_[b]; });
    if (!order.empty()) {
      forward_ += seconds_between(micro_batch_began_, ready_[order[0]]);
      for (size_t k = 1; k < order.size(); ++k) backward_[order[k]] += seconds_between(ready_[order[k - 1]], ready_[order[k]]);
      ++profiled_;
    }
  }
  const bool stepped = failing([&] { return current_->end_iteration(optimizer); });
  ended_ = Clock::now();
  return stepped;
}

void AutoSynchronizer::iteration_done(double seconds) {
  ++phase_iters_;
  switch (phase_) {
    case Phase::Profile:
      if (profiled_ == options_.profile_iters) profile_done();
      return;
    case Phase::Trial: {
      // A candidate's first slice runs its warm-up; a later round's runs one iteration (its
      // state restored: the first iteration after a switch still pays for first uses).
      const int warmup = timed_[trial_] == 0 ? ranked_[trial_].warmup_iters : 1;
      if (phase_iters_ > warmup) sums_[trial_] += seconds;
      const int timed = phase_iters_ - warmup;
      if (timed < slice_iters() && !(rounds_ == 1 && far_off(timed))) return;
      timed_[trial_] += timed;
      measured_[trial_] = sums_[trial_] / timed_[trial_];
      saved_[trial_] = current_->state_dict();
      if (++slot_ == in_turn_.size()) {
        if (rounds_ > 1) keep_close();
        if (++round_ == rounds_ || in_turn_.size() == 1) return trials_done();
        slot_ = 0;
      }
      // Each round starts one candidate later: contention that alternates about as fast as a
      // round lasts then does not meet a candidate in the same phase every round. (With two,
      // that would run one twice in a row.)
      const size_t n = in_turn_.size();
      trial_ = in_turn_[n > 2 ? (slot_ + round_) % n : slot_];
      phase_iters_ = 0;
      return switch_to(ranked_[trial_], saved_[trial_]);
    }
    case Phase::Run:
      if (!drift_.add(seconds)) return;
      const double mean = agreed(*group_, {static_cast<float>(drift_.window_mean())}, ReduceOp::Max)[0];
      const double baseline = drift_.baseline();
      if (!drift_.drifted(mean)) return;
      const std::string why = "drift: " + ms(mean) + " an iteration against " + ms(baseline);
      if (options_.log && group_->rank() == 0) *options_.log << "auto at iteration " << iteration_ << ": " << why
                                                             << " over " << options_.drift_window << " iterations; deciding again" << std::endl;
      if (!profile_.layers.empty()) return start_trials(why, in_use_.name);
      profile_reason_ = why;  // resumed: no profile yet, so profile first, as BSP
      phase_ = Phase::Profile;
      phase_iters_ = profiled_ = 0;
      return switch_to(profiling_candidate());
  }
}

// A trial ends early, a third of the way in, when it is already kFarOff times slower than what
// another tried candidate measured (or, not tried yet, is predicted) to take: it is not going to
// win, and a slow trial is the costliest part of a decision. Not in the survey, which times all.
bool AutoSynchronizer::far_off(int timed) {
  if (options_.trials == 0 || timed != std::max(2, options_.trial_iters / 3)) return false;
  std::vector<float> mine = {static_cast<float>(sums_[trial_] / timed)};
  for (size_t i = 0; i < trial_; ++i) mine.push_back(static_cast<float>(measured_[i]));
  const std::vector<float> slowest = agreed(*group_, mine, ReduceOp::Max);  // every rank compares the same numbers
  double others = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < tried(); ++i)
    if (i != trial_) others = std::min(others, i < trial_ ? static_cast<double>(slowest[i + 1]) : ranked_[i].predicted);
  return slowest[0] > kFarOff * others;
}

// Taking turns, after each round a candidate kFarOff times slower than another over their turns
// so far takes no further rounds: a slow one measured in a fast phase once is dropped a round later.
// The method in use takes every turn: dropped on slices that met slow phases of contention that
// comes and goes, the decision would go to whichever other slices met fast ones, for the rest of
// the run (a slow method in use costs its turns only).
void AutoSynchronizer::keep_close() {
  std::vector<float> mine;
  for (size_t i : in_turn_) mine.push_back(static_cast<float>(measured_[i]));
  const std::vector<float> slowest = agreed(*group_, mine, ReduceOp::Max);
  const float best = *std::min_element(slowest.begin(), slowest.end());
  std::vector<size_t> close;
  for (size_t k = 0; k < in_turn_.size(); ++k)
    if (slowest[k] <= kFarOff * best || ranked_[in_turn_[k]].name == incumbent_) close.push_back(in_turn_[k]);
  in_turn_ = close;
}

int AutoSynchronizer::slice_iters() const {
  return options_.trial_iters * (round_ + 1) / rounds_ - options_.trial_iters * round_ / rounds_;
}

void AutoSynchronizer::profile_done() {
  // The profile every rank ranks with: the mean over ranks of each rank's means.
  const size_t P = backward_.size();
  std::vector<float> mine(P + 2);
  for (size_t i = 0; i < P; ++i) mine[i] = static_cast<float>(backward_[i] / profiled_);
  mine[P] = static_cast<float>(forward_ / profiled_);
  mine[P + 1] = static_cast<float>(update_ / profiled_);
  const std::vector<float> sum = agreed(*group_, mine, ReduceOp::Sum);
  const double n = group_->size();
  profile_ = ModelProfile{};
  const double backward_total = std::accumulate(sum.begin(), sum.begin() + P, 0.0) / n;
  const auto& params = optimizer_->params();
  for (size_t i = 0; i < P; ++i) {
    LayerProfile l;
    l.name = "parameter " + std::to_string(i);
    l.backward = sum[i] / n;
    // The forward total split as backward is (each layer's forward is about half its backward).
    l.forward = backward_total > 0 ? sum[P] / n * l.backward / backward_total : sum[P] / n / P;
    l.bytes = static_cast<double>(params[i].numel()) * 4.0;
    profile_.layers.push_back(l);
  }
  profile_.update_seconds = sum[P + 1] / n;
  std::fill(backward_.begin(), backward_.end(), 0.0);
  forward_ = update_ = 0.0;
  start_trials(profile_reason_);
}

void AutoSynchronizer::start_trials(const std::string& reason, const std::string& incumbent) {
  const core::StateDict in_use_state = incumbent.empty() ? core::StateDict{} : current_->state_dict();
  retire_current();  // nothing in flight while the network is measured
  // Deciding again, the conditions have changed and may still be changing (contention that
  // comes and goes): the trials take turns, and the measurement keeps to small messages (on a
  // contended link a large one takes seconds, and the trials decide anyway).
  const bool again = reason != "start";
  const double limit = again ? 0.25 : 1.0;
  MeasuredNetwork network;
  // The sizes MG-WFBP times on its own (to 4 MiB, none above the whole gradient), so it is handed
  // the cost it would fit, but none that would take over `limit` seconds (4 MiB on a slow link).
  network.flat = measure_link_cost(*group_, group_->device(), profile_.gradient_bytes(), limit);
  const mintrain::SsgdConfig& s = dist_.ssgd();
  if (!s.rack().empty() || s.ranks_per_rack() > 0) {
    const std::vector<int> racks = racks_from_config(std::vector<int>(s.rack().begin(), s.rack().end()),
                                                     s.ranks_per_rack(), group_->size(), "dist.ssgd");
    HierarchicalGroup hierarchical(group_, racks, std::chrono::seconds(dist_.timeout_seconds()));
    network.hierarchical = measure_link_cost(hierarchical, group_->device(), profile_.gradient_bytes(), limit);
  }
  if (session_) network.servers = session_->measure_links(profile_.gradient_bytes(), limit);
  ranked_ = candidates_for(dist_, clips_, servers());
  rank_candidates(ranked_, profile_, network);
  if (again) calibrate(ranked_, misfit_);
  const size_t tries = options_.trials > 0 ? std::min<size_t>(options_.trials, ranked_.size()) : ranked_.size();
  tries_ = with_incumbent(ranked_, with_every_family(ranked_, tries), incumbent);
  incumbent_ = incumbent;
  rounds_ = again && tries_ > 1 ? std::min(options_.drift_trial_rounds, options_.trial_iters) : 1;
  round_ = 0;
  reason_ = reason;
  sums_.assign(ranked_.size(), 0.0);
  measured_.assign(ranked_.size(), -1.0);
  timed_.assign(ranked_.size(), 0);
  saved_.assign(ranked_.size(), {});
  // Deciding again, the drift window counts as one slice of the method in use, which goes on from
  // its state and settings: slices of two iterations can all land in fast phases of contention
  // that alternates.
  for (size_t i = 0; i < tries_; ++i)
    if (ranked_[i].name == incumbent) {
      ranked_[i].dist = in_use_.dist;  // MG-WFBP's plan holds for the alpha and beta it was made with
      saved_[i] = in_use_state;
      timed_[i] = slice_iters();
      sums_[i] = drift_.window_mean() * timed_[i];
    }
  phase_ = Phase::Trial;
  trial_ = slot_ = 0;
  in_turn_.resize(tries_);
  std::iota(in_turn_.begin(), in_turn_.end(), size_t{0});
  phase_iters_ = 0;
  switch_to(ranked_[0], saved_[0]);
}

void AutoSynchronizer::trials_done() {
  std::vector<float> mine(measured_.begin(), measured_.end());
  const std::vector<float> slowest = agreed(*group_, mine, ReduceOp::Max);  // an iteration lasts as long as its slowest rank
  AutoDecision d;
  d.iteration = iteration_;
  d.reason = reason_;
  for (size_t i = 0; i < ranked_.size(); ++i) {
    d.names.push_back(ranked_[i].name);
    d.predicted.push_back(ranked_[i].predicted);
    d.measured.push_back(slowest[i]);
  }
  d.timed = timed_;
  d.rounds = rounds_;
  d.winner = fastest(d.measured);
  if (misfit_.empty())  // the first trials, on the model's own predictions
    for (size_t i = 0; i < ranked_.size(); ++i)
      if (d.measured[i] > 0 && d.predicted[i] > 0) misfit_[d.names[i]] = d.measured[i] / d.predicted[i];
  if (options_.log && group_->rank() == 0) *options_.log << d.describe() << std::flush;
  if (d.winner != trial_) switch_to(ranked_[d.winner], saved_[d.winner]);
  drift_.rebase(0.0);  // the winner's first window is the reference: longer than a trial
  decisions_.push_back(std::move(d));
  phase_ = Phase::Run;
  phase_iters_ = 0;
}

void AutoSynchronizer::prepare_eval(layers::Module& model) {
  untimed_ = true;
  current_->prepare_eval(model);
}

void AutoSynchronizer::prepare_checkpoint(layers::Module& model) {
  untimed_ = true;
  current_->prepare_checkpoint(model);
}

std::string AutoSynchronizer::epoch_summary() {
  const std::string inner = current_->epoch_summary();
  return "auto: " + in_use_.name + (inner.empty() ? "" : "; " + inner);
}

std::string AutoSynchronizer::metrics_fields() {
  std::string fields = "\"auto_synchronizer\":\"" + in_use_.name + "\"";
  for (; decisions_reported_ < decisions_.size(); ++decisions_reported_)
    fields += ",\"auto_decision\":" + decisions_[decisions_reported_].json();
  const std::string inner = current_->metrics_fields();
  return inner.empty() ? fields : fields + "," + inner;
}

// "auto.synchronizer": the candidate in use, and what the measurement handed it (MG-WFBP's alpha
// and beta as float64 bits, ByteScheduler's credit), so a resume builds it exactly as it ran.
core::StateDict AutoSynchronizer::state_dict() const {
  core::StateDict state = current_->state_dict();
  const std::vector<std::string> names = candidate_names();
  const mintrain::DistConfig& d = in_use_.dist;
  const std::vector<int64_t> saved = {std::find(names.begin(), names.end(), in_use_.name) - names.begin(),
                                      std::bit_cast<int64_t>(d.ssgd().has_alpha() ? d.ssgd().alpha() : -1.0),
                                      std::bit_cast<int64_t>(d.ssgd().has_beta() ? d.ssgd().beta() : -1.0),
                                      d.bytescheduler().credit_bytes()};
  state.emplace_back("auto.synchronizer", Tensor::from_vector(saved, {4}));
  return state;
}

void AutoSynchronizer::load_state_dict(const core::StateDict& state) {
  core::StateDict inner;
  std::vector<int64_t> saved;
  for (const auto& [key, tensor] : state) {
    if (key == "auto.synchronizer" && tensor.dtype() == core::DType::Int64 && tensor.numel() == 4) {
      const Tensor host = tensor.contiguous();
      saved.assign(host.data<int64_t>(), host.data<int64_t>() + 4);
    } else {
      inner.emplace_back(key, tensor);
    }
  }
  // The choice the checkpoint ran with, without trials; drift decides again (profiling first).
  const auto names = candidate_names();
  for (Candidate c : candidates_for(dist_, clips_, servers())) {
    if (saved.empty() || saved[0] < 0 || saved[0] >= static_cast<int64_t>(names.size()) || c.name != names[saved[0]] ||
        phase_ != Phase::Profile)
      continue;
    if (std::bit_cast<double>(saved[1]) >= 0) c.dist.mutable_ssgd()->set_alpha(std::bit_cast<double>(saved[1]));
    if (std::bit_cast<double>(saved[2]) >= 0) c.dist.mutable_ssgd()->set_beta(std::bit_cast<double>(saved[2]));
    c.dist.mutable_bytescheduler()->set_credit_bytes(saved[3]);
    switch_to(c);
    phase_ = Phase::Run;
    phase_iters_ = 0;
    drift_.rebase(0.0);
  }
  current_->load_state_dict(inner);
}

namespace {

void validate_auto(const mintrain::DistConfig& d) {
  const mintrain::AutoConfig& a = d.auto_();
  check_at_least("dist.auto.profile_iters", a.profile_iters(), 1);
  check_at_least("dist.auto.trials", a.trials(), 0);
  check_at_least("dist.auto.trial_iters", a.trial_iters(), 1);
  check_above("dist.auto.drift_share", a.drift_share(), 0.0);
  check_at_least("dist.auto.drift_window", a.drift_window(), 1);
  check_at_least("dist.auto.max_redecisions", a.max_redecisions(), 0);
  check_at_least("dist.auto.drift_trial_rounds", a.drift_trial_rounds(), 1);
  candidates_for(d, false, 1);  // ps/ names are checked against the servers when the job starts
}

std::unique_ptr<Synchronizer> make_auto(const AlgorithmContext& c) {
  const mintrain::AutoConfig& a = c.dist.auto_();
  auto o = options_from<AutoOptions>(c);
  o.profile_iters = a.profile_iters();
  o.trials = a.trials();
  o.trial_iters = a.trial_iters();
  o.drift_share = a.drift_share();
  o.drift_window = a.drift_window();
  o.max_redecisions = a.max_redecisions();
  o.drift_trial_rounds = a.drift_trial_rounds();
  return std::make_unique<AutoSynchronizer>(c.group, c.dist, c.optimizer, c.batch_size, std::move(o),
                                            c.world_with_servers);
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(auto, {.validate = mt::dist::validate_auto,
                             .make = mt::dist::make_auto,
                             .names = {},
                             .serve = mt::dist::serve_auto_session,
                             .servers_if = {},
                             .reads = {"ssgd", "bytescheduler", "ps"}})
