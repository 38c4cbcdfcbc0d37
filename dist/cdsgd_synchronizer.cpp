#include "dist/cdsgd_synchronizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "dist/compression_config.h"
#include "dist/flat.h"
#include "dist/replicas.h"
#include "dist/dist_config.h"
#include "dist/registry.h"

namespace mt::dist {

CdsgdSynchronizer::CdsgdSynchronizer(std::shared_ptr<ProcessGroup> group, CdsgdOptions options)
    : group_(std::move(group)), options_(std::move(options)),
      compressor_(make_compressor(options_.compression)) {
  MT_CHECK(group_ != nullptr, "CD-SGD needs a process group");
  MT_CHECK(options_.warmup_iters >= 0, "dist.cdsgd.warmup_iters must be >= 0 (plain S-SGD "
           "iterations before CD-SGD starts), got ", options_.warmup_iters);
  MT_CHECK(options_.k >= 0, "dist.cdsgd.k must be >= 0 (every k-th iteration is full "
           "precision; 0 = never), got ", options_.k);
  MT_CHECK(std::isfinite(options_.lambda) && options_.lambda >= 0, "dist.cdsgd.lambda must be "
           ">= 0 (delay compensation; 0 = plain one-step delay), got ", options_.lambda);
}

std::string CdsgdSynchronizer::name() const {
  return "cdsgd/" + (exchange_ ? exchange_->compressor().name() : compressor_->name()) +
         (options_.momentum_correction ? "+momentum-correction" : "");
}

void CdsgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  optimizer_ = &optimizer;
  for (const auto& p : params_)
    MT_CHECK(p.device().is_cpu(), "rank ", rank(), ": CD-SGD runs on CPU tensors only (its "
             "CUDA kernels are not written yet); use dist.algorithm ssgd on GPUs");
  check_replicas_agree(*group_, model, options_.config_text);
  broadcast_parameters(*group_, model);
  broadcast_buffers(*group_, model);
  exchange_ = std::make_unique<GradientExchange>(group_, std::move(compressor_), total_numel(params_));
  global_ = flatten_values(params_);
  if (options_.momentum_correction)
    momentum_ = std::make_unique<MomentumCorrection>(global_.numel(), *options_.momentum_correction);
  // No grad-ready hooks: the exchange starts after backward and overlaps the next iteration.
}

void CdsgdSynchronizer::begin_iteration(int64_t) {
  rank_states_.forget();
  if (showing_global_) {  // after evaluation / a checkpoint: back to the local weights
    unflatten_into_values(local_, params_);
    showing_global_ = false;
  }
}

void CdsgdSynchronizer::apply_pending() { step_global(exchange_->wait(pending_), pending_lr_); }

void CdsgdSynchronizer::step_global(const Tensor& average, double lr) {
  // Under momentum correction the optimizer is plain SGD (takes_over_momentum): the momentum
  // is inside the average already.
  unflatten_into_values(global_, params_);
  unflatten_into_grads(average, params_);
  const double lr_now = optimizer_->lr();
  optimizer_->set_lr(lr);
  optimizer_->step();
  optimizer_->set_lr(lr_now);
  global_ = flatten_values(params_);
  // Drop the averaged gradients we set: from prepare_eval, the next backward would otherwise
  // accumulate into them.
  for (auto& p : params_) Tensor(p).zero_grad();
}

void CdsgdSynchronizer::step(optim::Optimizer& optimizer) {
  MT_CHECK(exchange_ != nullptr, "rank ", rank(), ": step() before setup()");
  MT_CHECK(&optimizer == optimizer_, "rank ", rank(), ": CD-SGD step() got another optimizer than "
           "setup(); it steps the global weights with the one given to setup");
  MT_CHECK(!showing_global_, "rank ", rank(), ": CD-SGD step() after prepare_eval() without "
           "begin_iteration(); call begin_iteration before each iteration's forward");
  const Tensor grad = flatten_grads(params_);
  const Tensor w_old = flatten_values(params_);
  // What travels: the gradient, or this rank's velocity under momentum correction.
  const Tensor direction = momentum_ ? momentum_->direction(grad, w_old) : grad;
  ++iterations_since_summary_;
  if (steps_ < options_.warmup_iters) {
    // Warm-up: plain synchronous S-SGD; local and global weights stay equal.
    PendingExchange e = exchange_->launch(direction, /*full_precision=*/true);
    step_global(exchange_->wait(e), optimizer.lr());
    unflatten_into_values(global_, params_);
    ++full_since_summary_;
    ++steps_;
    return;
  }
  // 1. Launch this iteration's exchange (full precision every k-th delayed iteration).
  const int64_t j = steps_ - options_.warmup_iters;  // 0-based delayed iteration
  const bool full = options_.k > 0 && (j + 1) % options_.k == 0;
  if (full) ++full_since_summary_;
  exchange_->warm_up(options_.compression, j);
  Tensor decoded;
  PendingExchange launched = exchange_->launch(direction, full, &decoded);
  if (momentum_ && !full) momentum_->mask_sent(decoded);
  // 2. The previous iteration's exchange, into W.
  if (pending_.active()) apply_pending();
  pending_ = std::move(launched);
  pending_lr_ = optimizer.lr();
  // 3. Local weights from the newest W and this rank's own (delay-compensated) gradient.
  const int64_t n = global_.numel();
  Tensor w_new = Tensor::empty({n});
  const float* W = global_.data<float>();
  const float* w = w_old.data<float>();
  const float* g = grad.data<float>();
  const float* d = direction.data<float>();
  float* out = w_new.data<float>();
  const float lr = static_cast<float>(optimizer.lr());
  const float lambda = static_cast<float>(options_.lambda);
  for (int64_t i = 0; i < n; ++i) out[i] = W[i] - lr * (d[i] + lambda * g[i] * g[i] * (W[i] - w[i]));
  unflatten_into_values(w_new, params_);
  ++steps_;
}

void CdsgdSynchronizer::prepare_eval(layers::Module& model) {
  broadcast_buffers(*group_, model);  // batch-norm statistics: rank 0's, as S-SGD
  if (!delayed() || showing_global_) return;  // warm-up: local == global
  local_ = flatten_values(params_);
  if (pending_.active()) apply_pending();
  unflatten_into_values(global_, params_);
  showing_global_ = true;
}

core::StateDict CdsgdSynchronizer::own_state() const {
  core::StateDict state{{"local", showing_global_ ? local_ : flatten_values(params_)},
                        {"residual", exchange_->error_feedback().residual()}};
  if (momentum_) momentum_->append_state(state);
  return state;
}

void CdsgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  if (rank_states_.collected() || !exchange_) return;
  rank_states_.collect(*group_, own_state(), "CD-SGD checkpoint state");
}

std::string CdsgdSynchronizer::epoch_summary() {
  if (!exchange_) return "";
  const int64_t full = full_since_summary_, iters = iterations_since_summary_;
  const std::string s = exchange_->take_summary(iters);
  iterations_since_summary_ = full_since_summary_ = 0;
  if (s.empty()) return s;
  return "CD-SGD " + s + "; " + std::to_string(full) + " of " + std::to_string(iters) +
         " iterations full precision (warm-up and every k-th)";
}

core::StateDict CdsgdSynchronizer::state_dict() const {
  if (!exchange_) return {};
  MT_CHECK(!pending_.active(), "rank ", rank(), ": CD-SGD state_dict() with an exchange in "
           "flight; call prepare_eval() first (the trainer does before every checkpoint)");
  const Tensor local = showing_global_ ? local_ : flatten_values(params_);
  core::StateDict state{{"global", global_.clone()},
                        {"local", local.clone()},
                        {"residual", exchange_->error_feedback().residual().clone()},
                        {"steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
  if (momentum_) momentum_->append_state(state);
  rank_states_.append_to(state, "cdsgd.");
  return state;
}

void CdsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(exchange_ != nullptr, "internal: load_state_dict before setup");
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
  global_.copy_(get("global").reshape({n}));
  local_ = get("local").reshape({n}).clone();
  exchange_->error_feedback().residual().copy_(get("residual").reshape({n}));
  steps_ = get("steps").item_int();
  if (momentum_) momentum_->load_state(state);
  // This rank's own local weights, residual and velocity, when the checkpoint has every rank's
  // (otherwise all ranks continue from rank 0's: close, but not the run that never stopped).
  if (const auto mine = rank_state(state, "cdsgd.", rank(), world_size(), nullptr)) {
    for (const auto& [name, t] : *mine) {
      MT_CHECK(name.rfind("velocity", 0) == 0 || t.numel() == n, "checkpoint: CD-SGD state \"cdsgd.rank",
               rank(), ".", name, "\" holds ", t.numel(), " values, the model ", n);
      if (name == "local") local_ = t.reshape({n}).clone();
      if (name == "residual") exchange_->error_feedback().residual().copy_(t.reshape({n}));
    }
    if (momentum_) momentum_->load_state(*mine);
  }
  pending_ = {};
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
  validate_compressor(d.compressor());
}

std::unique_ptr<Synchronizer> make_cdsgd(const AlgorithmContext& c) {
  MT_CHECK(c.dist.grad_accumulation_steps() == 1, "dist.grad_accumulation_steps must be 1 with dist.algorithm "
           "\"cdsgd\" (gradient accumulation is implemented for uncompressed S-SGD only), got ",
           c.dist.grad_accumulation_steps());
  CdsgdOptions o;
  o.compression = compression_options(c.dist.compressor());
  o.warmup_iters = c.dist.cdsgd().warmup_iters();
  o.k = c.dist.cdsgd().k();
  o.lambda = c.dist.cdsgd().lambda();
  o.momentum_correction = momentum_correction_options(c);
  o.config_text = c.config_text;
  return std::make_unique<CdsgdSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(cdsgd, mt::dist::validate_cdsgd, mt::dist::make_cdsgd)
