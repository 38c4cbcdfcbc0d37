#include "dist/ps/ps_synchronizer.h"

#include <algorithm>
#include <future>
#include <iostream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/strings.h"
#include "dist/registry.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

double secs(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

const std::vector<std::string>& ps_schedule_names() {
  static const std::vector<std::string> names = {"bsp", "wfbp", "staggered"};
  return names;
}

PsSynchronizer::PsSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world,
                               PsOptions options)
    : workers_(std::move(workers)), world_(std::move(world)), options_(std::move(options)) {
  MT_CHECK(workers_ != nullptr, "the parameter server's workers need a process group");
  check_worker_world(*workers_, world_.get(), "dist.algorithm \"ps\"");
  // The earlier uses' part alone exists only in the micro-batch that communicates.
  if (options_.grad_accumulation_steps > 1 || options_.schedule == PsSchedule::BSP) options_.split_tied = false;
}

PsSynchronizer::~PsSynchronizer() {
  // After a failed exchange the servers are gone or stopping on their own.
  if (set_up_ && !failed_ && workers_->rank() == 0) commands_.stop(steps_);
}

void PsSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  check_replicas_agree(*workers_, model, options_.config_text);
  make_replicas_identical(*workers_, model, {}, options_.log);
  std::vector<int64_t> numel;
  for (const auto& p : params_) {
    MT_CHECK(p.dtype() == core::DType::Float32, "dist.algorithm \"ps\" sums float32 gradients; parameter ",
             numel.size(), " is ", p.str());
    numel.push_back(p.numel());
  }
  // Push order: backward order, which for a sequential model is reverse registration order.
  std::vector<size_t> order;
  for (size_t i = params_.size(); i-- > 0;) order.push_back(i);
  plan_ = plan_partitions(numel, order, options_.partition_bytes, servers());
  partitions_of_.assign(params_.size(), {});
  for (size_t k = 0; k < plan_.size(); ++k) {
    partitions_of_[plan_[k].param].push_back(k);
    outgoing_.push_back(Tensor::zeros({plan_[k].numel}));
    incoming_.push_back(Tensor::zeros({plan_[k].numel}));
    notes_.push_back(int64s({workers_->rank(), id(k), 0}));
    receipts_.push_back(Tensor::zeros({1}, core::DType::Int64));
  }
  if (options_.schedule == PsSchedule::STAGGERED) {
    groups_ = staggered_push_groups(plan_, servers(), options_.rounds, workers_->rank());
    for (const auto& g : groups_) notes_[g.partitions.back()].data<int64_t>()[2] = 1;  // a receipt wanted
  }
  ready_.assign(plan_.size(), false);
  staged_.assign(plan_.size(), false);
  tied_.assign(params_.size(), false);
  used_again_.assign(params_.size(), false);
  late_rows_.assign(params_.size(), GradientRows());
  tied_known_ = !options_.split_tied;
  push_work_.assign(plan_.size(), nullptr);
  note_work_.assign(plan_.size(), nullptr);
  pull_work_.assign(plan_.size(), nullptr);
  receipt_work_.assign(plan_.size(), nullptr);
  pushed_at_.assign(plan_.size(), Clock::time_point{});
  pushed_.assign(plan_.size(), false);
  commands_ = ServerCommands(world_, workers_->size());
  greet_parameter_servers(*workers_, *world_, plan_, options_.partition_bytes, 0, options_.first_partition_id);
  if (workers_->rank() == 0 && options_.log) {
    *options_.log << "parameter server: " << servers() << " servers, " << name() << ", "
                  << describe_plan(plan_, servers(), options_.partition_bytes);
    if (options_.schedule == PsSchedule::STAGGERED)
      *options_.log << "; pushed in " << options_.rounds << " rounds, " << groups_.size() << " groups, at most two rounds unacknowledged";
    *options_.log << std::endl;
  }
  Synchronizer::setup(model, optimizer);  // grad-ready hooks -> on_gradient_ready
  if (options_.split_tied) {  // every micro-batch communicates (no accumulation): no check below
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].register_grad_contribution_hook(
          [this, i](core::Tensor&, const core::Tensor& part, int remaining) { on_gradient_part(i, part, remaining); });
  }
  set_up_ = true;
}

void PsSynchronizer::begin_iteration(int64_t iteration) {
  micro_batches_.begin(iteration);
  if (micro_batches_.communicate() && workers_->rank() == 0) commands_.send(ps::kStep, iteration);
}

void PsSynchronizer::push(size_t k) {
  const PsPartition& part = plan_[k];
  Tensor p = params_[part.param];
  if (!p.grad().defined()) p.set_grad(Tensor::zeros_like(p));  // unused this iteration
  core::NoGradGuard no_grad;
  if (tied_[part.param]) {
    if (!staged_[k]) outgoing_[k].zero_();  // no earlier use this iteration: its part is zero
  } else {
    outgoing_[k].copy_(p.grad().contiguous().view({-1}).narrow(0, part.offset, part.numel));  // to host
  }
  const int peer = workers_->size() + part.server;
  const std::string what = "pushing partition " + std::to_string(k) + " of iteration " +
                           std::to_string(micro_batches_.iteration());
  with_server(failed_, workers_->rank(), workers_->size(), part.server, what, [&] {
    pull_work_[k] = world_->recv(incoming_[k], peer, ps::pull_tag(id(k)));
    if (notes_[k].data<int64_t>()[2] != 0)
      receipt_work_[k] = world_->recv(receipts_[k], peer, ps::receipt_tag(id(k)));
    push_work_[k] = world_->send(outgoing_[k], peer, ps::push_tag(id(k)));
    note_work_[k] = world_->send(notes_[k], peer, ps::kNoteTag);
  });
  pushed_at_[k] = Clock::now();
  pushed_[k] = true;
  ++pushes_;
}

void PsSynchronizer::stage(size_t k, const core::Tensor& flat_part) {
  const Tensor slice = flat_part.narrow(0, plan_[k].offset, plan_[k].numel);
  if (staged_[k]) outgoing_[k].add_(slice.to(core::Device::cpu()));
  else outgoing_[k].copy_(slice);  // to host
  staged_[k] = true;
}

void PsSynchronizer::on_gradient_part(size_t param_index, const core::Tensor& part, int remaining) {
  if (!tied_known_) {  // the first iteration: watch
    if (std::find(ready_order_.begin(), ready_order_.end(), param_index) == ready_order_.end())
      ready_order_.push_back(param_index);
    if (remaining > 0) used_again_[param_index] = true;
    return;
  }
  if (!tied_[param_index]) return;
  core::NoGradGuard no_grad;
  if (remaining == 0) {  // the last use (an embedding lookup's rows)
    add_last_part(param_index, part);
    return;
  }
  // An earlier use: staged now (later parts are summed into the gradient in place).
  const Tensor flat = part.contiguous().view({-1});
  for (size_t k : partitions_of_[param_index]) stage(k, flat);
  if (remaining > 1) return;  // more earlier uses to come
  push_from_hook(param_index);
}

void PsSynchronizer::add_last_part(size_t param_index, const core::Tensor& part) {
  // Partitions not pushed yet carry the last part with the earlier ones, for no extra bytes;
  // only what falls in partitions already gone travels as rows (exchanged in step()).
  const Tensor flat = part.contiguous().view({-1});
  Tensor gone = Tensor::zeros({part.numel()});  // the last part where its partition was pushed already (host)
  for (size_t k : partitions_of_[param_index]) {
    if (pushed_[k]) {
      gone.narrow(0, plan_[k].offset, plan_[k].numel).copy_(flat.narrow(0, plan_[k].offset, plan_[k].numel));
    } else {
      stage(k, flat);
      ++last_parts_in_pushes_;
    }
  }
  late_rows_[param_index] = nonzero_rows(gone.view(part.shape()));
}

void PsSynchronizer::on_gradient_ready(size_t param_index, core::Tensor& param) {
  if (!micro_batches_.communicate() || options_.schedule == PsSchedule::BSP) return;
  if (tied_[param_index]) return;  // its parts went from on_gradient_part
  push_from_hook(param_index);
}

void PsSynchronizer::push_from_hook(size_t param_index) {
  if (options_.schedule == PsSchedule::STAGGERED) {
    for (size_t k : partitions_of_.at(param_index)) ready_[k] = true;
    push_staggered(/*finish=*/false);
    return;
  }
  for (size_t k : partitions_of_.at(param_index)) {
    push(k);
    ++pushes_from_hooks_;
  }
}

void PsSynchronizer::push_staggered(bool finish) {
  // At most two rounds unacknowledged: group t leaves once group t - 2S is taken. A receipt
  // queues behind its server's pulls (that link carries N of them a round), so with one round
  // the workers' links idled waiting for it; with two, rounds still complete in order.
  const size_t window = static_cast<size_t>(std::max(2, 2 * servers()));
  auto receipt_of = [&](size_t t) { return receipt_work_[groups_[t].partitions.back()]; };
  auto wait_receipt = [&](size_t t) {
    const std::string what = "waiting for its receipt of partition " + std::to_string(groups_[t].partitions.back()) +
                             " of iteration " + std::to_string(micro_batches_.iteration());
    with_server(failed_, workers_->rank(), workers_->size(), groups_[t].server, what, [&] { receipt_of(t)->wait(); });
  };
  // From a gradient hook, a group leaves only if its gradients are final and its receipt is in
  // already (backward must not wait); from step(), every group leaves, waiting as it must.
  for (; next_group_ < groups_.size(); ++next_group_) {
    const PsPushGroup& g = groups_[next_group_];
    if (!finish) {
      for (size_t k : g.partitions)
        if (!ready_[k]) return;
      if (next_group_ >= window && !receipt_of(next_group_ - window)->is_completed()) return;
    }
    if (next_group_ >= window) wait_receipt(next_group_ - window);
    for (size_t k : g.partitions) push(k);
    if (!finish) pushes_from_hooks_ += static_cast<int64_t>(g.partitions.size());
  }
  if (!finish) return;
  for (size_t t = groups_.size() >= window ? groups_.size() - window : 0; t < groups_.size(); ++t) wait_receipt(t);
  next_group_ = 0;
  ready_.assign(plan_.size(), false);
}

bool PsSynchronizer::end_iteration(optim::StepGuard&) {
  micro_batches_.check_step("worker", workers_->rank());
  if (options_.schedule == PsSchedule::STAGGERED) {
    TimelineSpan span(options_.timeline.get(), "staggered pushes");
    push_staggered(/*finish=*/true);
  }
  // BSP: everything now; WFBP: partitions of parameters no hook reported (unused this time).
  for (size_t k = 0; k < plan_.size(); ++k)
    if (!pushed_[k]) push(k);
  // The tied parameters' last uses, among the workers while the pulls come in.
  std::future<std::vector<RowsOfAllRanks>> rows;
  const bool split = split_;
  if (split) {
    rows = std::async(std::launch::async, [this] {
      std::vector<RowsOfAllRanks> all(params_.size());
      for (size_t i = 0; i < params_.size(); ++i) {
        if (!tied_[i]) continue;
        if (late_rows_[i].rows == 0) late_rows_[i] = nonzero_rows(Tensor::zeros_like(params_[i]));  // no last use
        all[i] = gather_rows(*workers_, late_rows_[i]);
      }
      return all;
    });
  }
  const auto wait_start = Clock::now();
  const float scale = 1.0f / static_cast<float>(workers_->size());
  {
    core::NoGradGuard no_grad;
    for (size_t k = 0; k < plan_.size(); ++k) {
      const PsPartition& part = plan_[k];
      const std::string what = "partition " + std::to_string(k) + " (parameter " + std::to_string(part.param) + ", " +
                               std::to_string(part.bytes()) + " bytes) of iteration " + std::to_string(micro_batches_.iteration());
      with_server(failed_, workers_->rank(), workers_->size(), part.server, "push/pull of " + what, [&] {
        push_work_[k]->wait();
        note_work_[k]->wait();
        pull_work_[k]->wait();
      });
      ++pulls_;
      if (options_.timeline) {
        options_.timeline->add("ps p" + std::to_string(k) + " s" + std::to_string(part.server), Timeline::kComm,
                               pushed_at_[k], Clock::now(), "{\"bytes\":" + std::to_string(part.bytes()) + "}");
      }
      incoming_[k].mul_(scale);
      Tensor grad = params_[part.param].grad();
      grad.view({-1}).narrow(0, part.offset, part.numel).copy_(incoming_[k]);  // to the device
      pushed_[k] = false;
      staged_[k] = false;
    }
  }
  if (split) {
    TimelineSpan span(options_.timeline.get(), "tied rows");
    std::vector<RowsOfAllRanks> all;
    try {
      all = rows.get();
    } catch (const std::exception& e) {
      failed_ = true;
      MT_FAIL("worker ", workers_->rank(), ": exchanging the last use's rows of a tied parameter among the ",
              workers_->size(), " workers failed (a worker died or timed out?): ", e.what());
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tied_[i]) continue;
      Tensor grad = params_[i].grad();
      add_rows(all[i], scale, grad);
      rows_exchanged_ += static_cast<int64_t>(late_rows_[i].ids.size());
      summary_row_bytes_ += all[i].bytes_received;
      late_rows_[i] = GradientRows();
    }
  }
  if (!tied_known_) learn_tied_parameters();
  if (workers_->rank() == 0) commands_.wait();
  summary_wait_s_ += secs(Clock::now() - wait_start);
  ++summary_steps_;
  if (options_.timeline) options_.timeline->add("wait", Timeline::kCompute, wait_start, Clock::now());
  ++steps_;
  return false;  // the trainer steps on the average
}

void PsSynchronizer::prepare_eval(layers::Module& model) {
  // Batch-norm statistics are each worker's own; evaluation and checkpoints use worker 0's.
  broadcast_buffers(*workers_, model);
}

void PsSynchronizer::learn_tied_parameters() {
  // Every worker must split the same parameters (the rows are a collective): a parameter is
  // split when every worker saw it used again.
  Tensor flags = Tensor::zeros({static_cast<int64_t>(params_.size())});
  for (size_t i = 0; i < params_.size(); ++i) flags.data<float>()[i] = used_again_[i] ? 1.0f : 0.0f;
  Tensor on_device = flags.to(workers_->device());
  workers_->allreduce(on_device, ReduceOp::Min)->wait();
  flags = on_device.to(core::Device::cpu());
  std::string names;
  for (size_t i = 0; i < params_.size(); ++i) {
    tied_[i] = flags.data<float>()[i] > 0.5f;
    if (tied_[i]) names += (names.empty() ? "" : ", ") + std::to_string(i) + " " + params_[i].str();
  }
  tied_known_ = true;
  split_ = !names.empty();
  if (!split_) return;
  if (options_.schedule == PsSchedule::STAGGERED) {
    // Groups in the order gradients became ready: a tied parameter's first part comes early.
    for (size_t i = params_.size(); i-- > 0;)
      if (std::find(ready_order_.begin(), ready_order_.end(), i) == ready_order_.end()) ready_order_.push_back(i);
    std::vector<size_t> order;
    for (size_t i : ready_order_)
      for (size_t k : partitions_of_[i]) order.push_back(k);
    groups_ = staggered_push_groups(plan_, servers(), options_.rounds, workers_->rank(), order);
    for (auto& note : notes_) note.data<int64_t>()[2] = 0;
    for (const auto& g : groups_) notes_[g.partitions.back()].data<int64_t>()[2] = 1;
  }
  if (workers_->rank() == 0 && options_.log)
    *options_.log << "parameter server: tied parameters (used twice in forward) exchanged in two parts from iteration "
                  << micro_batches_.iteration() + 1 << ": the earlier uses' through the servers as soon as final, the "
                  << "last use's with the partitions not pushed yet or as rows among the workers: " << names << std::endl;
}

std::string PsSynchronizer::epoch_summary() {
  if (summary_steps_ == 0) return "";
  int64_t bytes = 0;
  for (const auto& part : plan_) bytes += part.bytes();
  std::string out = core::formatted("ps: %.3g MB pushed and pulled per iteration over %d servers, %.1f ms waiting "
                                    "per iteration", static_cast<double>(bytes) / (1 << 20), servers(),
                                    summary_wait_s_ * 1e3 / summary_steps_);
  if (summary_row_bytes_ > 0)
    out += core::formatted(", %.3g MB of tied parameters' rows received per iteration",
                           static_cast<double>(summary_row_bytes_) / (1 << 20) / summary_steps_);
  summary_steps_ = 0;
  summary_wait_s_ = 0;
  summary_row_bytes_ = 0;
  return out;
}

namespace {

void validate_ps(const mintrain::DistConfig& d) {
  const mintrain::PsConfig& p = d.ps();
  check_at_least("dist.ps.partition_bytes", static_cast<double>(p.partition_bytes()), 4);
  check_at_least("dist.ps.rounds", p.rounds(), 1);
  check_at_least("dist.ps.servers", p.servers(), 0);
}

std::unique_ptr<Synchronizer> make_ps_synchronizer(const AlgorithmContext& c) {
  const mintrain::PsConfig& p = c.dist.ps();
  check_worker_world(*c.group, c.world_with_servers.get(), "dist.algorithm \"ps\"");
  const int servers = c.world_with_servers->size() - c.group->size();
  MT_CHECK_CONFIG(p.servers() == 0 || p.servers() == servers, "dist.ps.servers is ", p.servers(),
                  " but the job started ", servers, " parameter servers (MINTRAIN_NUM_SERVERS); make them agree, "
                  "or set dist.ps.servers 0");
  auto o = options_from<PsOptions>(c);
  const auto& names = ps_schedule_names();  // the registry has checked the name
  o.schedule = static_cast<PsSchedule>(std::find(names.begin(), names.end(), p.schedule()) - names.begin());
  o.partition_bytes = p.partition_bytes();
  o.rounds = p.rounds();
  o.split_tied = p.split_tied_gradients();
  o.grad_accumulation_steps = c.dist.grad_accumulation_steps();
  o.first_partition_id = c.first_partition_id;
  return std::make_unique<PsSynchronizer>(c.group, c.world_with_servers, std::move(o));
}

void serve_ps(const ServerContext& c) {
  MT_CHECK_CONFIG(c.dist.ps().servers() == 0 || c.dist.ps().servers() == c.servers, "parameter server ",
                  c.world->rank() - c.workers, " (rank ", c.world->rank(), "): dist.ps.servers is ",
                  c.dist.ps().servers(), " but the job started ", c.servers, " servers (MINTRAIN_NUM_SERVERS); "
                  "make them agree, or set dist.ps.servers 0");
  ParameterServer(c.world, {c.workers, c.servers, c.dist.ps().partition_bytes()}).run(c.log);
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(ps, {.validate = mt::dist::validate_ps,
                           .make = mt::dist::make_ps_synchronizer,
                           .names = {{"ps.schedule", mt::dist::ps_schedule_names()}},
                           .serve = mt::dist::serve_ps})
