#include "dist/local_sgd_synchronizer.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/dist_config.h"
#include "dist/registry.h"
#include "dist/replicas.h"

namespace mt::dist {

LocalSgdSynchronizer::LocalSgdSynchronizer(std::shared_ptr<ProcessGroup> group, LocalSgdOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  MT_CHECK(group_ != nullptr, "local SGD needs a process group");
  check_at_least("dist.local_sgd.period", options_.period, 1);
}

void LocalSgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  check_replicas_agree(*group_, model, options_.config_text);
  broadcast_parameters(*group_, model);
  broadcast_buffers(*group_, model);
  tensors_ = optimizer.params();
  for (const auto& [name, b] : model.named_buffers())
    if (b.dtype() == core::DType::Float32) tensors_.push_back(b);
  numel_ = 0;
  for (const auto& t : tensors_) numel_ += t.numel();
  // No gradient-ready hooks: gradients never leave the rank.
}

Tensor LocalSgdSynchronizer::flatten() const {
  Tensor flat = Tensor::empty({numel_}, core::DType::Float32,
                              tensors_.empty() ? core::Device::cpu() : tensors_[0].device());
  int64_t off = 0;
  for (const auto& t : tensors_) {
    flat.narrow(0, off, t.numel()).copy_(t.contiguous().view({-1}));
    off += t.numel();
  }
  return flat;
}

void LocalSgdSynchronizer::unflatten(const Tensor& flat) {
  int64_t off = 0;
  for (Tensor t : tensors_) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
    off += t.numel();
  }
}

void LocalSgdSynchronizer::average() {
  if (numel_ == 0) return;
  core::NoGradGuard no_grad;
  Tensor flat = flatten();
  finish(group_->allreduce(flat, ReduceOp::Sum), *group_,
         "local SGD: averaging the model after step " + std::to_string(steps_));
  flat.mul_(1.0f / static_cast<float>(group_->size()));
  unflatten(flat);
}

void LocalSgdSynchronizer::show_local() {
  if (!local_) return;
  core::NoGradGuard no_grad;
  unflatten(*local_);
  local_.reset();
}

void LocalSgdSynchronizer::step(optim::Optimizer& optimizer) {
  show_local();
  optimizer.step();  // this rank's gradient, this rank's optimizer state
  if (++steps_ % options_.period == 0) average();
}

void LocalSgdSynchronizer::prepare_eval(layers::Module& model) {
  if (local_ || steps_ % options_.period == 0) return;  // already the average (or all equal)
  core::NoGradGuard no_grad;
  local_ = flatten();
  average();
}

core::StateDict LocalSgdSynchronizer::state_dict() const {
  return {{"local_sgd.steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
}

void LocalSgdSynchronizer::load_state_dict(const core::StateDict& state) {
  // The model was loaded with the checkpoint's average; what remains is the step count, which
  // places the next average.
  local_.reset();
  for (const auto& [name, t] : state) {
    if (name != "local_sgd.steps") continue;
    MT_CHECK(t.numel() == 1 && t.dtype() == core::DType::Int64, "checkpoint entry sync.local_sgd.steps must hold "
             "one int64 value, got ", t.str());
    steps_ = t.item_int();
  }
}

namespace {

void validate_local_sgd(const mintrain::DistConfig& d) { check_at_least("dist.local_sgd.period", d.local_sgd().period(), 1); }

std::unique_ptr<Synchronizer> make_local_sgd(const AlgorithmContext& c) {
  MT_CHECK(c.dist.grad_accumulation_steps() == 1, "dist.grad_accumulation_steps must be 1 with dist.algorithm "
           "\"local_sgd\" (its steps are local already), got ", c.dist.grad_accumulation_steps());
  LocalSgdOptions o;
  o.period = c.dist.local_sgd().period();
  o.config_text = c.config_text;
  return std::make_unique<LocalSgdSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(local_sgd, mt::dist::validate_local_sgd, mt::dist::make_local_sgd)
