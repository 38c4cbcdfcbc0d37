#include "dist/compressed_ssgd_synchronizer.h"

#include "core/error.h"
#include "dist/flat.h"
#include "dist/replicas.h"

namespace mt::dist {

double average_over_ranks(ProcessGroup& group, double value) {
  Tensor t = Tensor::full({1}, value);
  finish(group.allreduce(t), group, "averaging a metric over ranks");
  return static_cast<double>(t.item()) / group.size();
}

CompressedSsgdSynchronizer::CompressedSsgdSynchronizer(std::shared_ptr<ProcessGroup> group,
                                                       CompressedSsgdOptions options)
    : group_(std::move(group)), options_(std::move(options)),
      compressor_(make_compressor(options_.compression)) {
  MT_CHECK(group_ != nullptr, "compressed S-SGD needs a process group");
}

void CompressedSsgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  for (const auto& p : params_)
    MT_CHECK(p.device().is_cpu(), "rank ", rank(), ": gradient compression runs on CPU tensors "
             "only (CUDA kernels are not written yet); use dist.compression NONE on GPUs");
  check_replicas_agree(*group_, model, options_.config_text);
  broadcast_parameters(*group_, model);
  broadcast_buffers(*group_, model);
  exchange_ = std::make_unique<GradientExchange>(group_, std::move(compressor_), total_numel(params_));
  if (options_.momentum_correction)
    momentum_ = std::make_unique<MomentumCorrection>(total_numel(params_), *options_.momentum_correction);
  // No grad-ready hooks: the whole model is one buffer, exchanged after backward.
}

void CompressedSsgdSynchronizer::step(optim::Optimizer& optimizer) {
  MT_CHECK(exchange_ != nullptr, "rank ", rank(), ": step() before setup()");
  rank_states_.forget();
  exchange_->warm_up(options_.compression, steps_);
  ++steps_;
  ++iterations_since_summary_;
  if (!momentum_) {
    PendingExchange e = exchange_->launch(flatten_grads(params_), /*full_precision=*/false);
    unflatten_into_grads(exchange_->wait(e), params_);
    optimizer.step();
    return;
  }
  // Momentum correction: exchange the velocities, then the (plain SGD) optimizer steps with
  // their average.
  Tensor decoded;
  PendingExchange e = exchange_->launch(momentum_->direction(flatten_grads(params_), flatten_values(params_)),
                                        /*full_precision=*/false, &decoded);
  momentum_->mask_sent(decoded);
  unflatten_into_grads(exchange_->wait(e), params_);
  optimizer.step();
}

void CompressedSsgdSynchronizer::prepare_eval(layers::Module& model) {
  broadcast_buffers(*group_, model);  // batch-norm statistics: rank 0's, as S-SGD
}

void CompressedSsgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  if (rank_states_.collected() || !exchange_) return;
  core::StateDict mine{{"residual", exchange_->error_feedback().residual()}};
  if (momentum_) momentum_->append_state(mine);
  rank_states_.collect(*group_, mine, "compressed S-SGD checkpoint state");
}

double CompressedSsgdSynchronizer::average(double value) { return average_over_ranks(*group_, value); }

std::string CompressedSsgdSynchronizer::epoch_summary() {
  if (!exchange_) return "";
  const std::string s = exchange_->take_summary(iterations_since_summary_);
  iterations_since_summary_ = 0;
  return s.empty() ? s : "compressed S-SGD " + s;
}

core::StateDict CompressedSsgdSynchronizer::state_dict() const {
  if (!exchange_) return {};
  core::StateDict state{{"residual", exchange_->error_feedback().residual().clone()},
                        {"steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
  if (momentum_) momentum_->append_state(state);
  rank_states_.append_to(state, "cssgd.");
  return state;
}

void CompressedSsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(exchange_ != nullptr, "internal: load_state_dict before setup");
  for (const auto& [name, t] : state) {
    if (name == "steps") steps_ = t.item_int();
    if (name != "residual") continue;
    MT_CHECK(t.numel() == exchange_->error_feedback().numel(), "checkpoint: the compression "
             "residual holds ", t.numel(), " values, the model ", exchange_->error_feedback().numel());
    exchange_->error_feedback().residual().copy_(t.reshape({t.numel()}));
  }
  if (momentum_) momentum_->load_state(state);
  // This rank's own residual and velocity, when the checkpoint has every rank's.
  if (const auto mine = rank_state(state, "cssgd.", rank(), world_size(), nullptr)) {
    for (const auto& [name, t] : *mine) {
      if (name != "residual") continue;
      MT_CHECK(t.numel() == exchange_->error_feedback().numel(), "checkpoint: the compression "
               "residual of rank ", rank(), " holds ", t.numel(), " values, the model ",
               exchange_->error_feedback().numel());
      exchange_->error_feedback().residual().copy_(t.reshape({t.numel()}));
    }
    if (momentum_) momentum_->load_state(*mine);
  }
}

}  // namespace mt::dist
