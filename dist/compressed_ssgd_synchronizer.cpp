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
  // No grad-ready hooks: the whole model is one buffer, exchanged after backward.
}

void CompressedSsgdSynchronizer::step(optim::Optimizer& optimizer) {
  MT_CHECK(exchange_ != nullptr, "rank ", rank(), ": step() before setup()");
  PendingExchange e = exchange_->launch(flatten_grads(params_), /*full_precision=*/false);
  unflatten_into_grads(exchange_->wait(e), params_);
  optimizer.step();
  ++iterations_since_summary_;
}

void CompressedSsgdSynchronizer::prepare_eval(layers::Module& model) {
  broadcast_buffers(*group_, model);  // batch-norm statistics: rank 0's, as S-SGD
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
  return {{"residual", exchange_->error_feedback().residual().clone()}};
}

void CompressedSsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(exchange_ != nullptr, "internal: load_state_dict before setup");
  for (const auto& [name, t] : state) {
    if (name != "residual") continue;
    MT_CHECK(t.numel() == exchange_->error_feedback().numel(), "checkpoint: the compression "
             "residual holds ", t.numel(), " values, the model ", exchange_->error_feedback().numel());
    exchange_->error_feedback().residual().copy_(t.reshape({t.numel()}));
  }
}

}  // namespace mt::dist
