#include "dist/flat.h"

#include "core/grad_mode.h"
#include "core/error.h"

namespace mt::dist {

int64_t total_numel(const std::vector<Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

namespace {
Tensor flatten(const std::vector<Tensor>& params, bool grads) {
  Tensor flat = Tensor::zeros({total_numel(params)});
  int64_t off = 0;
  for (const auto& p : params) {
    const Tensor src = grads ? p.grad() : p;
    if (src.defined()) flat.narrow(0, off, p.numel()).copy_(src.contiguous().reshape({p.numel()}));
    off += p.numel();
  }
  return flat;
}
}  // namespace

Tensor flatten_values(const std::vector<Tensor>& params) { return flatten(params, false); }
Tensor flatten_grads(const std::vector<Tensor>& params) { return flatten(params, true); }

void unflatten_into_values(const Tensor& flat, const std::vector<Tensor>& params) {
  core::NoGradGuard guard;
  int64_t off = 0;
  for (const auto& p : params) {
    Tensor(p).copy_(flat.narrow(0, off, p.numel()).reshape(p.shape()));
    off += p.numel();
  }
}

void unflatten_into_grads(const Tensor& flat, const std::vector<Tensor>& params) {
  int64_t off = 0;
  for (const auto& p : params) {
    // On the parameter's device (a host flat vector for CUDA parameters: CD-SGD stages there).
    Tensor slice = flat.narrow(0, off, p.numel()).reshape(p.shape());
    Tensor g = (slice.device() == p.device() ? slice.clone() : slice.to(p.device())).detach();
    Tensor(p).set_grad(g);
    off += p.numel();
  }
}

namespace {
// params[first, last)'s values one after another into flat, from its first element.
void copy_values(const std::vector<Tensor>& params, size_t first, size_t last, Tensor& flat) {
  int64_t off = 0;
  for (size_t i = first; i < last; ++i) {
    flat.narrow(0, off, params[i].numel()).copy_(params[i].contiguous().reshape({params[i].numel()}));
    off += params[i].numel();
  }
}
}  // namespace

Tensor gather_values(const std::vector<Tensor>& params, size_t first, size_t last) {
  int64_t n = 0;
  for (size_t i = first; i < last; ++i) n += params[i].numel();
  Tensor flat = Tensor::empty({n});
  copy_values(params, first, last, flat);
  return flat;
}

void flatten_values_into(const std::vector<Tensor>& params, Tensor& flat) {
  MT_CHECK(flat.numel() == total_numel(params), "internal: flattening ", total_numel(params),
           " parameter values into a vector of ", flat.numel());
  copy_values(params, 0, params.size(), flat);
}

void view_as_grads(const Tensor& flat, const std::vector<Tensor>& params) {
  int64_t off = 0;
  for (const auto& p : params) {
    Tensor slice = flat.narrow(0, off, p.numel()).reshape(p.shape());
    Tensor(p).set_grad((slice.device() == p.device() ? slice : slice.to(p.device())).detach());
    off += p.numel();
  }
}

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
