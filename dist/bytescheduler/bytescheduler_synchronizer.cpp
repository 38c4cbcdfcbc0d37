#include "dist/bytescheduler/bytescheduler_synchronizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <ostream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/strings.h"
#include "dist/comm/subgroups.h"
#include "dist/registry.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/replicas.h"
#include "optim/step_guard.h"

namespace mt::dist {
namespace {

constexpr int64_t kVoteNumel = 2;  // {NaN/Inf values counted on this rank, worker 0's iteration seconds}

double secs(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string kb(int64_t bytes) { return core::formatted("%.4g KB", static_cast<double>(bytes) / 1024.0); }

}  // namespace

ByteSchedulerSynchronizer::ByteSchedulerSynchronizer(std::shared_ptr<ProcessGroup> workers,
                                                     std::shared_ptr<ProcessGroup> world, ByteSchedulerOptions options)
    : workers_(std::move(workers)), world_(std::move(world)), options_(std::move(options)) {
  MT_CHECK(workers_ != nullptr, "ByteScheduler needs the workers' process group");
  workers_n_ = workers_->size();
  if (options_.architecture == BsArchitecture::PS) {
    check_worker_world(*workers_, world_.get(), "dist.bytescheduler.architecture \"ps\"");
  }
}

std::string ByteSchedulerSynchronizer::name() const {
  return options_.architecture == BsArchitecture::PS ? "bytescheduler/ps" : "bytescheduler/a2a";
}

ByteSchedulerSynchronizer::~ByteSchedulerSynchronizer() {
  if (set_up_) {
    bool healthy = !exchange_open_;  // an iteration cut short: the servers stop on their own
    {
      std::lock_guard<std::mutex> lock(mu_);
      healthy = healthy && error_.empty();
    }
    try {
      if (healthy) finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker %d: ByteScheduler could not finish its last exchange: %s\n", workers_->rank(), e.what());
      healthy = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (engine_.joinable()) engine_.join();
    if (healthy && options_.architecture == BsArchitecture::PS && workers_->rank() == 0) commands_.stop(exchanges_);
  }
}

std::string ByteSchedulerSynchronizer::part_name(size_t item) const {
  if (item == 0) return "the NaN/Inf vote";
  const PsPartition& p = plan_[item - 1];
  return "partition " + std::to_string(item - 1) + " (parameter " + std::to_string(p.param) + ", " +
         std::to_string(p.bytes()) + " bytes)";
}

void ByteSchedulerSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  optimizer_ = &optimizer;
  params_ = optimizer.params();
  check_replicas_agree(*workers_, model, options_.config_text);
  make_replicas_identical(*workers_, model, {}, options_.log);
  const size_t P = params_.size();
  std::vector<int64_t> numel;
  std::vector<size_t> forward_order(P);
  std::iota(forward_order.begin(), forward_order.end(), size_t{0});
  for (const auto& p : params_) {
    MT_CHECK(p.dtype() == core::DType::Float32, "dist.algorithm \"bytescheduler\" sums float32 gradients; "
             "parameter ", numel.size(), " is ", p.str());
    numel.push_back(p.numel());
  }
  const bool ps = options_.architecture == BsArchitecture::PS;
  MT_CHECK(ps || workers_->backend() == "gloo", "dist.algorithm \"bytescheduler\" with architecture \"a2a\" "
           "allreduces host copies of the gradients and needs a Gloo group, not ", workers_->backend(),
           ": on the CPU set dist.backend \"gloo\"; on a GPU (where the trainer refuses Gloo) use "
           "architecture \"ps\" or another algorithm");
  const int servers = ps ? world_->size() - workers_n_ : 1;
  // Priority = position in the plan: parameters in registration (forward) order, each from its
  // first element on.
  plan_ = plan_partitions(numel, forward_order, options_.partition_bytes, servers);
  const size_t items = plan_.size() + 1;
  items_of_.assign(P, {});
  threshold_.assign(items, 0);
  server_of_.assign(items, 0);
  std::vector<int64_t> item_bytes(items, kVoteNumel * 4);
  // Backward order is assumed to be reverse registration order: parameter p is ready on every
  // rank once the agreed count reaches P - p; the vote once every gradient and the vote are.
  threshold_[0] = static_cast<int64_t>(P) + 1;
  const int64_t slots = ps ? 0 : workers_n_;
  send_.assign(items, Tensor());
  result_.assign(items, Tensor());
  send_[0] = Tensor::zeros({kVoteNumel + slots});
  for (size_t k = 0; k < plan_.size(); ++k) {
    const size_t item = k + 1;
    items_of_[plan_[k].param].push_back(item);
    threshold_[item] = static_cast<int64_t>(P - plan_[k].param);
    server_of_[item] = plan_[k].server;
    item_bytes[item] = plan_[k].bytes();
    send_[item] = Tensor::zeros({plan_[k].numel + slots});
  }
  for (size_t i = 0; i < items; ++i)
    result_[i] = ps ? Tensor::zeros({i == 0 ? kVoteNumel : plan_[i - 1].numel}) : send_[i];
  if (ps) {
    for (size_t i = 0; i < items; ++i) {
      const int64_t id = options_.first_partition_id + static_cast<int64_t>(i);
      notes_.push_back(int64s({workers_->rank(), id, 1}));  // a receipt wanted
      receipts_.push_back(Tensor::zeros({1}, core::DType::Int64));
    }
  }
  local_ready_.assign(P, false);
  arrived_.assign(items, true);
  applied_.assign(P, true);
  times_.assign(items, ItemTimes{});

  // The credit: configured, or a search over 1, 2, 4, ... partitions up to the whole model.
  const int64_t total = std::accumulate(item_bytes.begin(), item_bytes.end(), int64_t{0});
  if (options_.credit_bytes > 0) {
    credit_now_ = options_.credit_bytes;
  } else {
    std::vector<int64_t> credits;
    for (int64_t c = options_.partition_bytes;; c *= 2) {
      credits.push_back(std::min(c, total));
      if (c >= total) break;
      if (credits.size() == 6) {  // a few candidates, a few iterations each: the search stays short
        credits.push_back(total);
        break;
      }
    }
    search_ = CreditSearch(credits, options_.search_iters);
    credit_now_ = search_.current();
  }

  if (ps) {
    greet_parameter_servers(*workers_, *world_, plan_, options_.partition_bytes, kVoteNumel, options_.first_partition_id);
    commands_ = ServerCommands(world_, workers_n_);
  } else {
    // A communicator of the engine's own: the trainer's metric averages on the workers' group
    // may run while the engine still sends, and collectives on one group must not interleave.
    engine_group_ = private_communicator(*workers_);
  }
  if (workers_->rank() == 0 && options_.log) {
    *options_.log << "ByteScheduler (" << name() << "): "
                  << (ps ? describe_plan(plan_, servers, options_.partition_bytes)
                         : std::to_string(plan_.size()) + " partitions of at most " + kb(options_.partition_bytes))
                  << ", layers nearer the input first; credit "
                  << (options_.credit_bytes > 0 ? kb(options_.credit_bytes)
                                                : "searched over " + std::to_string(search_.size()) + " candidates, " +
                                                      std::to_string(options_.search_iters) + " iterations each")
                  << std::endl;
  }
  Synchronizer::setup(model, optimizer);  // grad-ready hooks
  gate_forward(model);
  engine_ = std::thread([this] { engine_loop(); });
  set_up_ = true;
}

void ByteSchedulerSynchronizer::gate_forward(layers::Module& model) {
  // Every module that owns parameters asks, before its forward, for each of them by its index
  // among the optimizer's parameters (tied weights are found where they are registered).
  std::vector<layers::Module*> modules = {&model};
  for (size_t m = 0; m < modules.size(); ++m)
    for (const auto& [name, child] : modules[m]->named_children()) modules.push_back(child.get());
  std::weak_ptr<bool> alive = alive_;
  for (layers::Module* module : modules) {
    std::vector<size_t> indices;
    for (const auto& [name, tensor] : module->own_parameters())
      for (size_t i = 0; i < params_.size(); ++i)
        if (params_[i].same(tensor)) indices.push_back(i);
    if (indices.empty()) continue;
    module->register_forward_pre_hook([this, alive, indices](layers::Module&) {
      if (alive.expired()) return;
      for (size_t i : indices) before_forward_use(i);
    });
  }
}

void ByteSchedulerSynchronizer::begin_iteration(int64_t iteration) {
  micro_batches_.begin(iteration);
}

void ByteSchedulerSynchronizer::wait_for(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                                         const std::string& what) {
  const auto deadline = Clock::now() + 3 * options_.timeout;
  while (error_.empty() && !done()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !done())
      error_ = "nothing happened within 3 x the " + std::to_string(options_.timeout.count() / 1000) + " s timeout";
  }
  if (!error_.empty()) fail(what);
}

void ByteSchedulerSynchronizer::wait_engine_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t e = exchange_;
  wait_for(lock, [&] { return engine_done_ >= e; },
           "finishing the exchange of iteration " + std::to_string(micro_batches_.iteration()));
}

void ByteSchedulerSynchronizer::fail(const std::string& what) {
  MT_FAIL("worker ", workers_->rank(), ": ByteScheduler (", name(), ") failed ", what, ": ", error_,
          "; stopping (the job cannot go on without every worker and server)");
}

void ByteSchedulerSynchronizer::start_exchange() {
  finish_pending();
  wait_engine_idle();  // its buffers are about to be written
  // Credit of this exchange: the search's candidate, or the chosen one.
  if (search_.searching()) credit_now_ = search_.current();
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(local_ready_.begin(), local_ready_.end(), false);
    local_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    times_.assign(arrived_.size(), ItemTimes{});
    send_order_.clear();
    local_nonfinite_ = 0;
    exchange_credit_ = credit_now_;
    ++exchange_;
  }
  cv_.notify_all();
  exchange_open_ = true;
}

void ByteSchedulerSynchronizer::stage(size_t param) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (local_ready_[param]) return;  // staged already
  }
  Tensor p = params_[param];
  core::NoGradGuard no_grad;
  const Tensor grad = p.grad().defined() ? p.grad().contiguous().view({-1}).to(core::Device::cpu()) : Tensor();
  for (size_t item : items_of_[param]) {
    const PsPartition& part = plan_[item - 1];
    Tensor data = send_[item].narrow(0, 0, part.numel);
    if (grad.defined()) {
      data.copy_(grad.narrow(0, part.offset, part.numel));
      const float* v = data.data<float>();  // counted before the engine may sum in place
      for (int64_t j = 0; j < part.numel; ++j) local_nonfinite_ += std::isfinite(v[j]) ? 0 : 1;
    } else {
      data.copy_(Tensor::zeros({part.numel}));  // unused this iteration: zeros, as S-SGD counts it
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    local_ready_[param] = true;
    const auto now = Clock::now();
    for (size_t item : items_of_[param]) times_[item].ready = now;
    const int64_t P = static_cast<int64_t>(params_.size());
    while (local_count_ < P && local_ready_[static_cast<size_t>(P - 1 - local_count_)]) ++local_count_;
    ++ready_events_;
  }
  cv_.notify_all();
}

void ByteSchedulerSynchronizer::on_gradient_ready(size_t param_index, core::Tensor& param) {
  if (!micro_batches_.communicate()) return;  // an earlier micro-batch: gradients just accumulate locally
  if (!exchange_open_) start_exchange();
  stage(param_index);
}

bool ByteSchedulerSynchronizer::end_iteration(optim::StepGuard& optimizer) {
  micro_batches_.check_step("worker", workers_->rank());
  optimizer_ = &optimizer;
  if (!exchange_open_) start_exchange();
  for (size_t i = 0; i < params_.size(); ++i) stage(i);  // those without a gradient this iteration: zeros
  // The vote: this rank's NaN/Inf count over what it sends, and worker 0's iteration time.
  const int64_t bad = local_nonfinite_;
  const auto now = Clock::now();
  const double interval = last_step_at_ == Clock::time_point{} ? 0.0 : secs(now - last_step_at_);
  last_step_at_ = now;
  float* vote = send_[0].data<float>();
  vote[0] = static_cast<float>(bad);
  vote[1] = workers_->rank() == 0 ? static_cast<float>(interval) : 0.0f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    local_count_ = static_cast<int64_t>(params_.size()) + 1;
    times_[0].ready = now;
    ++ready_events_;
  }
  cv_.notify_all();
  const auto wait_start = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    wait_for(lock, [&] { return static_cast<bool>(arrived_[0]); },
             "waiting for the NaN/Inf vote of iteration " + std::to_string(micro_batches_.iteration()));
  }
  summary_wait_s_ += secs(Clock::now() - wait_start);
  if (options_.timeline) options_.timeline->add("wait (vote)", Timeline::kCompute, wait_start, Clock::now());
  const float* result = result_[0].data<float>();
  pending_skipped_ = result[0] > 0;
  choose_credit_after(static_cast<double>(result[1]));
  pending_lr_ = optimizer.lr();
  pending_ = true;
  exchange_open_ = false;
  std::fill(applied_.begin(), applied_.end(), false);
  applied_count_ = 0;
  norm_sq_ = 0;
  ++exchanges_;
  ++summary_steps_;
  optimizer.record_step(pending_skipped_, last_norm_);
  return true;
}

void ByteSchedulerSynchronizer::choose_credit_after(double seconds) {
  if (!search_.record(exchanges_, seconds)) return;
  credit_now_ = search_.current();
  options_.credit_bytes = credit_now_;
  if (workers_->rank() == 0 && options_.log) {
    *options_.log << "ByteScheduler credit search (worker 0's iteration time):" << search_.describe(kb) << " chose "
                  << kb(credit_now_) << std::endl;
  }
}

void ByteSchedulerSynchronizer::before_forward_use(size_t param_index) {
  if (!pending_ || applied_[param_index]) return;
  const auto gate_start = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    const std::vector<size_t>& items = items_of_[param_index];
    wait_for(lock, [&] { return std::all_of(items.begin(), items.end(), [&](size_t i) { return arrived_[i]; }); },
             "waiting for parameter " + std::to_string(param_index) + "'s partitions");
    if (param_index == 0) {
      unarrived_at_first_gate_ = static_cast<int64_t>(std::count(arrived_.begin(), arrived_.end(), false));
    }
  }
  const auto gate_end = Clock::now();
  summary_gate_s_ += secs(gate_end - gate_start);
  if (options_.timeline && gate_end - gate_start > std::chrono::microseconds(20))
    options_.timeline->add("gate p" + std::to_string(param_index), Timeline::kCompute, gate_start, gate_end);
  apply(param_index);
}

void ByteSchedulerSynchronizer::apply(size_t param) {
  applied_[param] = true;
  ++applied_count_;
  if (!pending_skipped_) {
    core::NoGradGuard no_grad;
    Tensor p = params_[param];
    Tensor grad = Tensor::zeros({p.numel()});
    for (size_t item : items_of_[param]) {
      const PsPartition& part = plan_[item - 1];
      grad.narrow(0, part.offset, part.numel).copy_(result_[item].narrow(0, 0, part.numel));
    }
    grad.mul_(1.0f / static_cast<float>(workers_n_));
    const float* g = grad.data<float>();
    double sq = 0;
    for (int64_t j = 0; j < grad.numel(); ++j) sq += static_cast<double>(g[j]) * g[j];
    norm_sq_ += sq;
    const double lr_now = optimizer_->lr();
    optimizer_->set_lr(pending_lr_);  // the rate of the iteration that made the gradient
    {
      TimelineSpan span(options_.timeline.get(), "optimizer p" + std::to_string(param));
      optimizer_->step_parameter(param, grad.view(p.shape()).to(p.device()));
    }
    optimizer_->set_lr(lr_now);
  }
  if (applied_count_ == params_.size()) {
    pending_ = false;
    last_norm_ = std::sqrt(norm_sq_);
  }
}

void ByteSchedulerSynchronizer::finish_pending() {
  if (!pending_) return;
  wait_engine_idle();
  for (size_t i = 0; i < params_.size() && pending_; ++i)
    if (!applied_[i]) apply(i);
}

void ByteSchedulerSynchronizer::finish() {
  if (exchange_open_) return;  // between backward and step: step() finishes it
  finish_pending();
}

void ByteSchedulerSynchronizer::prepare_eval(layers::Module& model) {
  finish();
  broadcast_buffers(*workers_, model);  // batch-norm statistics: worker 0's, as S-SGD
}

std::vector<ByteSchedulerSynchronizer::ItemTimes> ByteSchedulerSynchronizer::last_exchange_times() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_times_;
}

std::vector<size_t> ByteSchedulerSynchronizer::last_send_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_send_order_;
}

std::string ByteSchedulerSynchronizer::epoch_summary() {
  if (summary_steps_ == 0) return "";
  int64_t bytes = 0;
  for (const auto& part : plan_) bytes += part.bytes();
  int64_t probes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    probes = probes_;
  }
  const std::string probe_note =
      options_.architecture == BsArchitecture::A2A
          ? ", " + std::to_string((probes - summary_probes_) / summary_steps_) + " readiness probes per iteration"
          : "";
  const std::string line = core::formatted(
      "%s: %.3g MB in %zu partitions per iteration, credit %s, %.1f ms waiting for the vote and %.1f ms at forward "
      "gates per iteration%s", name().c_str(), static_cast<double>(bytes) / (1 << 20), plan_.size(),
      kb(credit_now_).c_str(), summary_wait_s_ * 1e3 / summary_steps_, summary_gate_s_ * 1e3 / summary_steps_,
      probe_note.c_str());
  summary_probes_ = probes;
  summary_steps_ = 0;
  summary_wait_s_ = summary_gate_s_ = 0;
  return line;
}

// ---- The engine thread ----

void ByteSchedulerSynchronizer::engine_loop() {
  for (int64_t next = 0;; ++next) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || exchange_ >= next; });
      if (exchange_ < next) return;  // stopping, nothing more to send
    }
    try {
      if (options_.architecture == BsArchitecture::PS) {
        run_ps(next);
      } else {
        run_a2a(next);
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.empty()) error_ = e.what();
      }
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      engine_done_ = next;
      last_times_ = times_;
      last_send_order_ = send_order_;
    }
    cv_.notify_all();
  }
}

void ByteSchedulerSynchronizer::mark_arrived(size_t item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ItemTimes& t = times_[item];
    t.arrived = Clock::now();
    arrived_[item] = true;
    if (options_.timeline) {
      const int64_t bytes = item == 0 ? kVoteNumel * 4 : plan_[item - 1].bytes();
      const auto waited_us = static_cast<int64_t>(secs(t.sent - t.ready) * 1e6);
      const std::string name =
          item == 0 ? "bs vote" : "bs p" + std::to_string(item - 1) + " param " + std::to_string(plan_[item - 1].param);
      const std::string args =
          "{\"bytes\":" + std::to_string(bytes) + ",\"ready_to_sent_us\":" + std::to_string(waited_us) + "}";
      options_.timeline->add(name, Timeline::kComm, t.sent, t.arrived, args);
    }
  }
  cv_.notify_all();
}

CreditQueue ByteSchedulerSynchronizer::exchange_queue() {
  std::vector<int64_t> bytes(send_.size());
  bytes[0] = kVoteNumel * 4;
  for (size_t k = 0; k < plan_.size(); ++k) bytes[k + 1] = plan_[k].bytes();
  std::lock_guard<std::mutex> lock(mu_);
  return CreditQueue(bytes, exchange_credit_);
}

void ByteSchedulerSynchronizer::run_a2a(int64_t exchange) {
  CreditQueue queue = exchange_queue();
  const int N = workers_n_;
  const int me = engine_group_->rank();
  struct InFlight {
    int64_t item;  // -1: a probe
    Tensor buffer;
    std::shared_ptr<Work> work;
  };
  std::deque<InFlight> in_flight;
  int64_t agreed = 0;  // gradients ready on every rank (backward order), + 1 once every vote is
  auto slots_of = [&](Tensor& buffer) { return buffer.narrow(0, buffer.numel() - N, N); };
  auto post = [&](int64_t item, Tensor buffer) {
    Tensor slots = slots_of(buffer);
    slots.copy_(Tensor::zeros({N}));
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots.data<float>()[me] = static_cast<float>(local_count_);
      if (item >= 0) {
        times_[static_cast<size_t>(item)].sent = Clock::now();
        send_order_.push_back(static_cast<size_t>(item));
      }
    }
    in_flight.push_back({item, buffer, engine_group_->allreduce(buffer)});
  };
  while (!queue.all_finished()) {
    for (size_t item = 0; item < send_.size(); ++item)
      if (threshold_[item] <= agreed) queue.mark_ready(item);
    while (auto item = queue.next()) post(static_cast<int64_t>(*item), send_[*item]);
    if (in_flight.empty()) {
      // Nothing to send that every rank has: wait for this rank's backward to go on, then ask the
      // others how far they are (every rank is here at the same point of the same sequence).
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || local_count_ > agreed; });
        if (stopping_ && local_count_ <= agreed) MT_FAIL("stopped while exchange ", exchange, " was unfinished");
        ++probes_;
      }
      post(-1, Tensor::zeros({N}));
    }
    InFlight done = std::move(in_flight.front());
    in_flight.pop_front();
    dist::finish(done.work, *engine_group_,
           done.item < 0 ? std::string("a readiness probe") : "the allreduce of " + part_name(static_cast<size_t>(done.item)));
    const Tensor slots = slots_of(done.buffer);
    const float* s = slots.data<float>();
    agreed = std::max(agreed, static_cast<int64_t>(*std::min_element(s, s + N)));
    if (done.item < 0) continue;
    const size_t item = static_cast<size_t>(done.item);
    queue.finished(item);
    mark_arrived(item);
  }
}

void ByteSchedulerSynchronizer::run_ps(int64_t exchange) {
  CreditQueue queue = exchange_queue();
  auto guarded = [&](size_t item, const std::string& what, const std::function<void()>& f) {
    const int s = server_of_[item];
    try {
      f();
    } catch (const std::exception& e) {
      MT_FAIL(parameter_server_name(s, workers_n_), " is gone or silent (", what, " ", part_name(item),
              " of exchange ", exchange, "): ", e.what());
    }
  };
  if (workers_->rank() == 0) commands_.send(ps::kStep, exchange);  // the servers serve one iteration per command
  struct Push {
    size_t item;
    std::shared_ptr<Work> data, note, receipt;
  };
  std::vector<std::shared_ptr<Work>> pulls(send_.size());
  std::deque<Push> in_flight;  // pushes whose receipt has not come, oldest first
  int64_t seen_events = -1;
  while (!queue.all_finished()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_events = ready_events_;
      for (size_t p = 0; p < params_.size(); ++p)
        if (local_ready_[p])
          for (size_t item : items_of_[p]) queue.mark_ready(item);
      if (local_count_ > static_cast<int64_t>(params_.size())) queue.mark_ready(0);
    }
    while (auto next = queue.next()) {
      const size_t item = *next;
      const int peer = workers_n_ + server_of_[item];
      const int64_t id = options_.first_partition_id + static_cast<int64_t>(item);
      guarded(item, "posting the push/pull of", [&] {
        pulls[item] = world_->recv(result_[item], peer, ps::pull_tag(id));
        auto receipt = world_->recv(receipts_[item], peer, ps::receipt_tag(id));
        auto data = world_->send(send_[item], peer, ps::push_tag(id));
        in_flight.push_back({item, data, world_->send(notes_[item], peer, ps::kNoteTag), receipt});
      });
      std::lock_guard<std::mutex> lock(mu_);
      times_[item].sent = Clock::now();
      send_order_.push_back(item);
    }
    if (!in_flight.empty()) {
      // The credit comes back when the server has taken the push (its receipt), not when Gloo
      // has taken the bytes. Not at the sum either: that needs every worker's push, and two
      // workers that picked different partitions would each wait for the other's.
      const Push push = in_flight.front();
      in_flight.pop_front();
      guarded(push.item, "pushing", [&] {
        push.data->wait();
        push.note->wait();
        push.receipt->wait();
      });
      queue.finished(push.item);
    } else if (!queue.all_sent()) {
      // Nothing in flight and nothing ready: wait for backward (or step) to make something ready.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || ready_events_ != seen_events; });
      if (stopping_ && ready_events_ == seen_events) MT_FAIL("stopped while exchange ", exchange, " was unfinished");
    }
  }
  // Pulls in priority order: the next forward needs layer 0 first (the servers answer in the
  // order the pushes arrived, so most later layers' sums are already here).
  for (size_t item = 0; item < pulls.size(); ++item) {
    guarded(item, "pulling", [&] { pulls[item]->wait(); });
    mark_arrived(item);
  }
  if (workers_->rank() == 0) commands_.wait();
}

// ResNet-20, 4 workers, 100 Mbit/s (docs/PERF.md): on one server 32 and 128 KiB beat 512 KiB and
// 4 MB by 15-20 % (smaller bursts into its link); on allreduce 128 KiB, 512 KiB and 32 MB were
// within 4 %, 32 KiB 24 % slower.
int64_t default_partition_bytes(BsArchitecture a) { return a == BsArchitecture::PS ? 128 << 10 : 512 << 10; }

namespace {

BsArchitecture architecture_of(const mintrain::ByteSchedulerConfig& b) {
  return b.architecture() == "ps" ? BsArchitecture::PS : BsArchitecture::A2A;  // checked by the registry
}

}  // namespace

int64_t partition_bytes_of(const mintrain::ByteSchedulerConfig& b) {
  return b.partition_bytes() > 0 ? b.partition_bytes() : default_partition_bytes(architecture_of(b));
}

namespace {

void validate_bytescheduler(const mintrain::DistConfig& d) {
  const mintrain::ByteSchedulerConfig& b = d.bytescheduler();
  MT_CHECK(b.partition_bytes() == 0 || b.partition_bytes() >= 8, "dist.bytescheduler.partition_bytes must be 0 (the "
           "architecture's default) or >= 8, got ", b.partition_bytes());
  check_at_least("dist.bytescheduler.credit_bytes", static_cast<double>(b.credit_bytes()), 0);
  check_at_least("dist.bytescheduler.search_iters", b.search_iters(), 2);
}

std::unique_ptr<Synchronizer> make_bytescheduler(const AlgorithmContext& c) {
  const mintrain::ByteSchedulerConfig& b = c.dist.bytescheduler();
  MT_CHECK(c.optimizer.max_grad_norm() == 0, "optimizer.max_grad_norm ", c.optimizer.max_grad_norm(), " clips by "
           "the norm of all gradients together, which dist.algorithm \"bytescheduler\" does not know when it "
           "applies layer 0's update (each parameter is updated as its partitions arrive); set "
           "optimizer.max_grad_norm 0, or use dist.algorithm \"ssgd\" or \"ps\"");
  auto o = options_from<ByteSchedulerOptions>(c);
  o.architecture = architecture_of(b);
  o.partition_bytes = partition_bytes_of(b);
  o.credit_bytes = b.credit_bytes();
  o.search_iters = b.search_iters();
  o.grad_accumulation_steps = c.dist.grad_accumulation_steps();
  o.first_partition_id = c.first_partition_id;
  o.timeout = std::chrono::seconds(c.dist.timeout_seconds());
  // "ps" without servers: the constructor names the setting.
  MT_CHECK(o.architecture == BsArchitecture::PS || c.world_with_servers == nullptr, "the job started parameter "
           "servers but dist.bytescheduler.architecture is \"a2a\" (allreduce among the workers); set it to \"ps\" "
           "or start no servers");
  return std::make_unique<ByteSchedulerSynchronizer>(c.group, c.world_with_servers, std::move(o));
}

// Architecture "ps": the parameter server's, with ByteScheduler's partitions.
void serve_bytescheduler(const ServerContext& c) {
  ParameterServer(c.world, {c.workers, c.servers, partition_bytes_of(c.dist.bytescheduler())}).run(c.log);
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(bytescheduler, {.validate = mt::dist::validate_bytescheduler,
                                      .make = mt::dist::make_bytescheduler,
                                      .names = {{"bytescheduler.architecture", {"a2a", "ps"}}},
                                      .serve = mt::dist::serve_bytescheduler,
                                      .servers_if = {"bytescheduler.architecture", {"ps"}}})
