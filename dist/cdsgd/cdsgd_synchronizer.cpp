#include "dist/cdsgd/cdsgd_synchronizer.h"

#include <algorithm>
#include <iomanip>
#include <ostream>

#include "core/error.h"
#include "core/strings.h"
#include "dist/compress/compression_config.h"
#include "dist/flat.h"
#include "dist/replicas.h"
#include "dist/comm/subgroups.h"
#include "dist/registry.h"
#include "optim/step_guard.h"

namespace mt::dist {

namespace {

// The compressor the exchange uses: TWO_BIT's tau divided by the samples per rank (the threshold
// is on the per-sample-sum scale, see the header).
std::shared_ptr<const Compressor> cdsgd_compressor(const CdsgdOptions& o) {
  if (o.compressor) return o.compressor;
  MT_CHECK(o.samples_per_rank >= 1, "CD-SGD needs the samples per rank (data.batch_size) >= 1, got ",
           o.samples_per_rank);
  CompressionOptions c = o.compression;
  if (c.type == "two_bit") c.tau /= static_cast<double>(o.samples_per_rank);
  return make_compressor(c);
}

}  // namespace

CdsgdSynchronizer::CdsgdSynchronizer(std::shared_ptr<ProcessGroup> group, CdsgdOptions options)
    : group_(std::move(group)), options_(std::move(options)), compressor_(cdsgd_compressor(options_)) {
  MT_CHECK(group_ != nullptr, "CD-SGD needs a process group");
}

std::string CdsgdSynchronizer::name() const {
  return "cdsgd/" + compressor_->name() + (options_.momentum_correction ? "+momentum-correction" : "");
}

void CdsgdSynchronizer::build_buckets() {
  const size_t P = params_.size();
  param_offset_.assign(P, 0);
  int64_t off = 0;
  for (size_t i = 0; i < P; ++i) {
    param_offset_[i] = off;
    off += params_[i].numel();
  }
  // From the last parameter backwards (backward produces gradients roughly in that order).
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024 / 4);
  buckets_.clear();
  bucket_of_.assign(P, -1);
  size_t last = P;
  while (last > 0) {
    size_t first = last - 1;
    int64_t numel = params_[first].numel();
    while (first > 0 && numel + params_[first - 1].numel() <= cap) numel += params_[--first].numel();
    ParamBucket b;
    b.first = first;
    b.last = last;
    for (size_t i = first; i < last; ++i) bucket_of_[i] = static_cast<int>(buckets_.size());
    buckets_.push_back(std::move(b));
    last = first;
  }
}

void CdsgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  optimizer_ = &optimizer;
  MT_CHECK(!params_.empty(), "rank ", rank(), ": CD-SGD got an optimizer without parameters");
  check_replicas_agree(*group_, model, options_.config_text);
  make_replicas_identical(*group_, model, {}, options_.log);
  build_buckets();
  // The exchanges run on a communicator of their own, from the worker threads: nothing the
  // training thread issues can interleave with them.
  std::shared_ptr<ProcessGroup> exchange_group = private_communicator(*group_);
  // Payloads live where the group's collectives run: on the GPU for NCCL; CUDA parameters with
  // Gloo are staged through host memory (the flat state is always on the host).
  const core::Device param_device = params_[0].device();
  const core::Device exchange_device =
      group_->backend() == "nccl" && param_device.is_cuda() ? param_device : core::Device::cpu();
  std::vector<BucketRange> ranges;
  for (const auto& b : buckets_) {
    const int64_t first = param_offset_[b.first];
    const int64_t end = param_offset_[b.last - 1] + params_[b.last - 1].numel();
    ranges.push_back({first, end - first});
  }
  const int64_t n = total_numel(params_);
  ExchangeRoute route = ExchangeRoute::Allgather;
  const double bits = static_cast<double>(compressor_->payload_bytes(n)) * 8.0 / static_cast<double>(n);
  const int break_even = break_even_world_size(bits);
  if (options_.exchange == "reduce_scatter" ||
      (options_.exchange == "auto" && !compressor_->summable() && world_size() > break_even))
    route = ExchangeRoute::DecodeReduceScatter;
  pipeline_ = std::make_unique<ExchangePipeline>(exchange_group, compressor_, options_.compression,
                                                 std::move(ranges), route, options_.timeout,
                                                 exchange_device, options_.timeline);
  global_ = flatten_values(params_);
  if (options_.momentum_correction) {
    momentum_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b)
      momentum_.push_back(std::make_unique<MomentumCorrection>(pipeline_->bucket(b).numel,
                                                               *options_.momentum_correction));
  }
  optim::OptimizerOptions local = options_.local_step;
  local.momentum = 0.0;
  local.dampening = 0.0;
  local.nesterov = false;
  local_sgd_ = optim::build_optimizer("sgd", params_, local);
  if (rank() == 0 && options_.log) {
    std::ostream& log = *options_.log;
    log << "CD-SGD: " << compressor_->name() << ", " << buckets_.size() << " bucket(s) of at most "
        << options_.bucket_cap_mb << " MB compressed on the communication side as backward fills them";
    if (options_.compression.type == "two_bit" && !options_.compressor)
      log << "; tau " << options_.compression.tau
          << (options_.samples_per_rank > 1 ? " on the per-sample-sum scale (tau / " +
                                                  std::to_string(options_.samples_per_rank) + " on the batch mean)"
                                            : std::string(" on the batch mean"));
    if (!compressor_->summable())
      log << "; payloads " << (route == ExchangeRoute::Allgather ? "allgathered" : "decoded, reduce-scattered and allgathered")
          << " (" << std::setprecision(3) << bits << std::setprecision(6) << " bits per value: allgather moves more bytes than a dense ring past "
          << break_even << " ranks; this job has " << world_size() << ", dist.cdsgd.exchange \""
          << options_.exchange << "\")";
    log << "; local lr " << options_.local_lr_factor << " x the optimizer's";
    if (options_.momentum_correction)
      log << "; momentum correction on (dist.cdsgd.momentum_correction: each rank exchanges its "
             "velocity, momentum " << options_.momentum_correction->momentum
          << ", and the global step is plain SGD)";
    log << std::endl;
  }
  Synchronizer::setup(model, optimizer);  // grad-ready hooks -> on_gradient_ready
}

bool CdsgdSynchronizer::full_precision_now() const {
  if (steps_ < options_.warmup_iters) return true;
  const int64_t j = steps_ - options_.warmup_iters;  // 0-based delayed iteration
  return options_.k > 0 && (j + 1) % options_.k == 0;
}

void CdsgdSynchronizer::start_iteration_if_needed() {
  if (current_) return;
  const int64_t j = steps_ - options_.warmup_iters;
  current_ = pipeline_->begin(full_precision_now(), j >= 0 ? j : -1);
  next_launch_ = 0;
  for (auto& b : buckets_) {
    // Not zero-filled: every gradient's slice is written, by its hook or in step() (zeros there
    // for a parameter without a gradient).
    b.values = Tensor::empty({pipeline_->bucket(static_cast<size_t>(&b - buckets_.data())).numel});
    b.pending = b.last - b.first;
    b.arrived.assign(b.pending, false);
    b.launched = false;
    b.direction = Tensor();
    b.weights = Tensor();
  }
}

void CdsgdSynchronizer::begin_iteration(int64_t) {
  rank_states_.forget();
  if (showing_global_) {  // after evaluation / a checkpoint: back to the local weights
    unflatten_into_values(local_, params_);
    showing_global_ = false;
  }
}

void CdsgdSynchronizer::on_gradient_ready(size_t param_index, core::Tensor& param) {
  if (!pipeline_ || showing_global_ || param_index >= bucket_of_.size()) return;
  start_iteration_if_needed();
  ParamBucket& b = buckets_[static_cast<size_t>(bucket_of_[param_index])];
  const size_t slot = param_index - b.first;
  if (b.launched || b.arrived[slot]) return;
  const Tensor g = param.grad();
  if (!g.defined()) return;  // counted as zeros at step()
  const int64_t at = param_offset_[param_index] - param_offset_[b.first];
  b.values.narrow(0, at, param.numel()).copy_(g.contiguous().reshape({param.numel()}));
  b.arrived[slot] = true;
  --b.pending;
  if (b.pending == 0) launch_ready();
}

void CdsgdSynchronizer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch_bucket(next_launch_++);
}

void CdsgdSynchronizer::launch_bucket(size_t b) {
  ParamBucket& bucket = buckets_[b];
  Tensor direction = bucket.values;
  if (!momentum_.empty()) {
    mask_velocity(b);
    bucket.weights = gather_values(params_, bucket.first, bucket.last);
    direction = momentum_[b]->direction(bucket.values, bucket.weights);
  }
  bucket.direction = direction;
  bucket.launched = true;
  pipeline_->launch(current_, b, direction);
}

void CdsgdSynchronizer::mask_velocity(size_t b) {
  // Momentum factor masking: the velocity forgets what the last exchange sent, before it moves
  // on (TOPK only; the encoding of that bucket had a whole iteration to finish). Masking twice
  // with the same payload changes nothing.
  if (!momentum_[b]->options().mask_sent || !previous_) return;
  const Tensor sent = pipeline_->own_decoded(*previous_, b);
  if (sent.defined()) momentum_[b]->mask_sent(sent);
}

void CdsgdSynchronizer::apply_pending() {
  const auto start = std::chrono::steady_clock::now();
  const Tensor average = pipeline_->wait(*pending_);
  blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  step_global(average, pending_lr_);
  pending_.reset();
}

void CdsgdSynchronizer::step_global(const Tensor& average, double lr) {
  // Under momentum correction the optimizer is plain SGD (takes_over_momentum): the momentum
  // is inside the average already. The gradients are views of the average, which nothing
  // reads after this step.
  unflatten_into_values(global_, params_);
  view_as_grads(average, params_);
  const double lr_now = optimizer_->lr();
  optimizer_->set_lr(lr);
  optimizer_->step();
  optimizer_->set_lr(lr_now);
  flatten_values_into(params_, global_);
  // Drop the averaged gradients we set: from prepare_eval, the next backward would otherwise
  // accumulate into them.
  for (auto& p : params_) Tensor(p).zero_grad();
}

void CdsgdSynchronizer::step_local(optim::StepGuard& optimizer, const Tensor& local_direction) {
  // The parameters hold W; a skipped step (NaN/Inf) leaves them there. The gradients are views
  // of the direction, made for this step only.
  view_as_grads(local_direction, params_);
  local_sgd_->set_lr(optimizer.lr() * options_.local_lr_factor);
  optimizer.step_with(*local_sgd_);
}

bool CdsgdSynchronizer::end_iteration(optim::StepGuard& optimizer) {
  MT_CHECK(pipeline_ != nullptr, "rank ", rank(), ": end_iteration() before setup()");
  MT_CHECK(&optimizer == optimizer_, "rank ", rank(), ": CD-SGD end_iteration() got another optimizer than "
           "setup(); it steps the global weights with the one given to setup");
  MT_CHECK(!showing_global_, "rank ", rank(), ": CD-SGD end_iteration() after prepare_eval() without "
           "begin_iteration(); call begin_iteration before each iteration's forward");
  // 1. Whatever backward did not hand over yet (no hooks, unused parameters: their gradients,
  //    or zeros) goes now, in bucket order.
  start_iteration_if_needed();
  for (auto& b : buckets_) {
    if (b.launched) continue;
    for (size_t i = b.first; i < b.last; ++i) {
      if (b.arrived[i - b.first]) continue;
      const Tensor g = params_[i].grad();
      Tensor slice = b.values.narrow(0, param_offset_[i] - param_offset_[b.first], params_[i].numel());
      if (g.defined()) {
        slice.copy_(g.contiguous().reshape({params_[i].numel()}));
      } else {
        slice.zero_();
      }
      b.arrived[i - b.first] = true;
    }
    b.pending = 0;
  }
  launch_ready();
  std::shared_ptr<PipelineIteration> launched = std::move(current_);
  current_.reset();
  previous_ = launched;
  const bool full = launched->full_precision;
  ++iterations_since_summary_;
  if (full) ++full_since_summary_;
  if (steps_ < options_.warmup_iters) {
    // Warm-up: plain synchronous S-SGD; local and global weights stay equal.
    pending_ = launched;
    pending_lr_ = optimizer.lr();
    apply_pending();  // leaves W in the parameters: the local weights
    ++steps_;
    return true;
  }
  // Every pass over the whole model here runs on the training thread, between this backward
  // and the next forward: the gradient g, the launched direction d and the local weights w are
  // read from the buckets (copied there once, at launch), not flattened again.
  for (auto& b : buckets_)
    if (!b.weights.defined()) b.weights = gather_values(params_, b.first, b.last);
  // 2. The previous iteration's exchange, into W; it leaves W in the parameters.
  const bool applied = pending_ != nullptr;
  if (pending_) apply_pending();
  pending_ = launched;
  pending_lr_ = optimizer.lr();
  if (!applied) unflatten_into_values(global_, params_);
  // 3. Local weights from the newest W and this rank's own (delay-compensated) direction,
  //    through the step guard.
  Tensor local_direction = Tensor::empty({global_.numel()});
  const float lambda = static_cast<float>(options_.lambda);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t off = pipeline_->bucket(b).offset, len = pipeline_->bucket(b).numel;
    const float* W = global_.data<float>() + off;
    const float* w = buckets_[b].weights.data<float>();
    const float* g = buckets_[b].values.data<float>();
    const float* d = buckets_[b].direction.data<float>();
    float* out = local_direction.data<float>() + off;
    for (int64_t i = 0; i < len; ++i) out[i] = d[i] + lambda * g[i] * g[i] * (W[i] - w[i]);
  }
  step_local(optimizer, local_direction);
  for (auto& p : params_) Tensor(p).zero_grad();
  ++steps_;
  if (!pipeline_->encoding_done(*launched)) ++steps_before_encoding_done_;
  return true;
}

void CdsgdSynchronizer::prepare_eval(layers::Module& model) {
  broadcast_buffers(*group_, model);  // batch-norm statistics: rank 0's, as S-SGD
  if (!delayed() || showing_global_) return;  // warm-up: local == global
  local_ = flatten_values(params_);
  if (pending_) apply_pending();
  // The last exchange's masking now, not at the next launch: a checkpoint then holds the
  // velocity the run goes on with.
  for (size_t b = 0; b < momentum_.size(); ++b) mask_velocity(b);
  unflatten_into_values(global_, params_);
  showing_global_ = true;
}

void CdsgdSynchronizer::append_velocity(core::StateDict& state) const {
  if (momentum_.empty()) return;
  Tensor flat = Tensor::zeros({global_.numel()});
  for (size_t b = 0; b < momentum_.size(); ++b)
    flat.narrow(0, pipeline_->bucket(b).offset, pipeline_->bucket(b).numel).copy_(momentum_[b]->velocity());
  core::StateDict one;
  momentum_[0]->append_state(one);  // "velocity_started": the same in every bucket
  state.emplace_back("velocity", flat);
  for (auto& [k, t] : one)
    if (k == "velocity_started") state.emplace_back(k, t);
}

void CdsgdSynchronizer::load_velocity(const core::StateDict& state) {
  for (size_t b = 0; b < momentum_.size(); ++b) {
    core::StateDict mine;
    for (const auto& [k, t] : state) {
      if (k == "velocity") {
        MT_CHECK(t.numel() == global_.numel(), "checkpoint: the momentum-correction velocity holds ",
                 t.numel(), " values, the model ", global_.numel());
        mine.emplace_back(k, t.reshape({t.numel()}).narrow(0, pipeline_->bucket(b).offset, pipeline_->bucket(b).numel).clone());
      } else if (k == "velocity_started") {
        mine.emplace_back(k, t);
      }
    }
    momentum_[b]->load_state(mine);
  }
}

core::StateDict CdsgdSynchronizer::own_state() const {
  pipeline_->drain();
  core::StateDict state{{"local", showing_global_ ? local_ : flatten_values(params_)},
                        {"residual", pipeline_->residual()}};
  append_velocity(state);
  return state;
}

void CdsgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  if (rank_states_.collected() || !pipeline_) return;
  rank_states_.collect(*group_, own_state(), "CD-SGD checkpoint state");
}

std::string CdsgdSynchronizer::epoch_summary() {
  if (!pipeline_) return "";
  const int64_t full = full_since_summary_, iters = iterations_since_summary_;
  pipeline_->drain();  // once an epoch: the statistics are written by the worker threads
  const ExchangeStats s = pipeline_->take_stats();
  const double blocked = blocked_seconds_;
  iterations_since_summary_ = full_since_summary_ = 0;
  blocked_seconds_ = 0;
  if (s.exchanges == 0) return "";
  const double it = static_cast<double>(std::max<int64_t>(1, iters));
  std::string line = core::formatted(
      "CD-SGD %s: %.1f KB sent per iteration (float32 %.1f KB, ratio %.1fx) in %zu bucket(s), "
      "%s; the training thread waited %.2f ms per iteration for the previous exchange "
      "(compression and decoding ran on the communication side); %lld of %lld iterations "
      "full precision (warm-up and every k-th)",
      compressor_->name().c_str(), s.bytes_sent / it / 1024.0, s.raw_bytes / it / 1024.0,
      s.bytes_sent > 0 ? s.raw_bytes / s.bytes_sent : 0.0, buckets_.size(),
      pipeline_->route() == ExchangeRoute::Allgather ? "allgathered" : "decoded and reduce-scattered",
      blocked / it * 1e3, static_cast<long long>(full), static_cast<long long>(iters));
  if (pipeline_->nonfinite_buckets() > 0)
    line += "; " + std::to_string(pipeline_->nonfinite_buckets()) +
            " bucket(s) with NaN/Inf values were sent as zeros so far";
  return line;
}

core::StateDict CdsgdSynchronizer::state_dict() const {
  if (!pipeline_) return {};
  MT_CHECK(!pending_, "rank ", rank(), ": CD-SGD state_dict() with an exchange in "
           "flight; call prepare_eval() first (the trainer does before every checkpoint)");
  pipeline_->drain();
  const Tensor local = showing_global_ ? local_ : flatten_values(params_);
  core::StateDict state{{"global", global_.clone()},
                        {"local", local.clone()},
                        {"residual", pipeline_->residual()},
                        {"steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
  append_velocity(state);
  rank_states_.append_to(state, "cdsgd.");
  return state;
}

void CdsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(pipeline_ != nullptr, "internal: load_state_dict before setup");
  // A checkpoint of another algorithm (e.g. S-SGD's warm start): CD-SGD starts from the
  // model's weights, local = global, with an empty residual.
  if (std::none_of(state.begin(), state.end(), [](const auto& e) { return e.first == "global"; })) {
    global_ = flatten_values(params_);
    return;
  }
  const int64_t n = global_.numel();
  auto get = [&](const std::string& name) -> Tensor {
    for (const auto& [k, t] : state)
      if (k == name) return t;
    MT_FAIL("checkpoint: CD-SGD state \"", name, "\" is missing (was the checkpoint written by "
            "another dist.algorithm?)");
  };
  for (const char* name : {"global", "local", "residual"})
    MT_CHECK(get(name).numel() == n, "checkpoint: CD-SGD state \"", name, "\" holds ",
             get(name).numel(), " values, the model ", n);
  pipeline_->drain();
  global_.copy_(get("global").reshape({n}));
  local_ = get("local").reshape({n}).clone();
  pipeline_->set_residual(get("residual").reshape({n}));
  steps_ = get("steps").item_int();
  load_velocity(state);
  // This rank's own local weights, residual and velocity, when the checkpoint has every rank's
  // (otherwise all ranks continue from rank 0's: close, but not the run that never stopped).
  if (const auto mine = rank_state(state, "cdsgd.", rank(), world_size(), nullptr)) {
    for (const auto& [name, t] : *mine) {
      MT_CHECK(name.rfind("velocity", 0) == 0 || t.numel() == n, "checkpoint: CD-SGD state \"cdsgd.rank",
               rank(), ".", name, "\" holds ", t.numel(), " values, the model ", n);
      if (name == "local") local_ = t.reshape({n}).clone();
      if (name == "residual") pipeline_->set_residual(t.reshape({n}));
    }
    load_velocity(*mine);
  }
  pending_.reset();
  previous_.reset();
  current_.reset();
  // The model holds what the checkpoint's model held (W); the local weights return at the next
  // begin_iteration.
  unflatten_into_values(global_, params_);
  showing_global_ = true;
}

namespace {

void validate_cdsgd(const mintrain::DistConfig& d) {
  check_at_least("dist.cdsgd.warmup_iters", d.cdsgd().warmup_iters(), 0);
  check_at_least("dist.cdsgd.k", d.cdsgd().k(), 0);
  check_at_least("dist.cdsgd.lambda", d.cdsgd().lambda(), 0.0);
  check_at_least("dist.cdsgd.local_lr", d.cdsgd().local_lr(), 0.0);
  check_above("dist.cdsgd.bucket_cap_mb", d.cdsgd().bucket_cap_mb(), 0.0);  // the float32 MB compressed as one message
  MT_CHECK(!d.cdsgd().has_momentum_correction() || !d.compressor().has_momentum_correction() ||
               d.cdsgd().momentum_correction() == d.compressor().momentum_correction(),
           "dist.cdsgd.momentum_correction (", d.cdsgd().momentum_correction() ? "true" : "false",
           ") and dist.compressor.momentum_correction (", d.compressor().momentum_correction() ? "true" : "false",
           ") disagree; set only dist.cdsgd.momentum_correction");
  validate_compressor(d.compressor());
}

std::unique_ptr<Synchronizer> make_cdsgd(const AlgorithmContext& c) {
  MT_CHECK(c.dist.grad_accumulation_steps() == 1, "dist.grad_accumulation_steps must be 1 with dist.algorithm "
           "\"cdsgd\" (gradient accumulation is implemented for uncompressed S-SGD only), got ",
           c.dist.grad_accumulation_steps());
  const mintrain::CdsgdConfig& cd = c.dist.cdsgd();
  auto o = options_from<CdsgdOptions>(c);
  o.compression = compression_options(c.dist.compressor());
  o.warmup_iters = cd.warmup_iters();
  o.k = cd.k();
  o.lambda = cd.lambda();
  // cdsgd.momentum_correction (default on); the older compressor.momentum_correction when only
  // it is set. The shared helper reads the compressor's field, so hand it the decision there.
  mintrain::DistConfig dist = c.dist;
  if (!c.dist.compressor().has_momentum_correction())
    dist.mutable_compressor()->set_momentum_correction(cd.momentum_correction());
  AlgorithmContext resolved{c.group, dist, c.optimizer, c.common, c.world_with_servers, c.batch_size};
  o.momentum_correction = momentum_correction_options(resolved);
  if (cd.local_lr() > 0) {
    MT_CHECK(c.optimizer.lr() > 0, "dist.cdsgd.local_lr is relative to optimizer.lr (the local rate follows "
             "the schedule), which must then be > 0, got ", c.optimizer.lr());
    o.local_lr_factor = cd.local_lr() / c.optimizer.lr();
  }
  // The local step's weight decay: the optimizer's, except L2 decay that momentum correction has
  // already folded into the velocity.
  const bool decoupled = c.optimizer.decoupled_weight_decay() || c.optimizer.name() == "adamw";
  o.local_step.decoupled_weight_decay = decoupled;
  o.local_step.weight_decay = o.momentum_correction && !decoupled ? 0.0 : c.optimizer.weight_decay();
  o.local_step.no_decay_1d = c.optimizer.no_decay_1d();
  o.samples_per_rank = cd.tau_scale() == "sample_sum" && c.batch_size > 0 ? c.batch_size : 1;
  o.bucket_cap_mb = cd.bucket_cap_mb();
  o.exchange = cd.exchange();
  o.timeout = std::chrono::seconds(c.dist.timeout_seconds());
  return std::make_unique<CdsgdSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(cdsgd, {.validate = mt::dist::validate_cdsgd,
                               .make = mt::dist::make_cdsgd,
                               .names = {{"compressor.type", mt::dist::compressor_names()},
                                         {"cdsgd.tau_scale", {"sample_sum", "batch_mean"}},
                                         {"cdsgd.exchange", {"auto", "allgather", "reduce_scatter"}}}})
