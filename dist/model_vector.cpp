#include "dist/model_vector.h"

#include "core/grad_mode.h"
#include "dist/replicas.h"

namespace mt::dist {

ModelVector::ModelVector(const layers::Module& model, std::vector<Tensor> params) : tensors_(std::move(params)) {
  for (const auto& [name, b] : model.named_buffers())
    if (b.dtype() == core::DType::Float32) tensors_.push_back(b);
  for (const auto& t : tensors_) numel_ += t.numel();
}

Tensor ModelVector::flatten() const {
  Tensor flat = Tensor::empty({numel_}, core::DType::Float32, device());
  int64_t off = 0;
  for (const auto& t : tensors_) {
    flat.narrow(0, off, t.numel()).copy_(t.contiguous().view({-1}));
    off += t.numel();
  }
  return flat;
}

void ModelVector::unflatten(const Tensor& flat) {
  int64_t off = 0;
  for (Tensor t : tensors_) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
    off += t.numel();
  }
}

void ModelVector::average_over(ProcessGroup& group, const std::string& what) {
  // A group of one still runs the allreduce: the path a larger world takes, exercised by worlds
  // of one (dist.force_distributed, the GPU tests).
  if (numel_ == 0) return;
  core::NoGradGuard no_grad;
  Tensor flat = flatten();
  finish(group.allreduce(flat, ReduceOp::Sum), group, what);
  flat.mul_(1.0f / static_cast<float>(group.size()));
  unflatten(flat);
}

void ModelVector::show_average(ProcessGroup& group, const std::string& what) {
  if (showing_average()) return;  // already shown, nothing trained since
  core::NoGradGuard no_grad;
  aside_ = flatten();
  average_over(group, what);
}

void ModelVector::show_local() {
  if (!showing_average()) return;
  core::NoGradGuard no_grad;
  unflatten(aside_);
  aside_ = Tensor();
}

}  // namespace mt::dist
