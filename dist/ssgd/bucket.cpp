#include "dist/ssgd/bucket.h"

#include <algorithm>

#include "core/error.h"
#include "core/grad_mode.h"

namespace mt::dist {

Bucket::Bucket(std::vector<size_t> params, const std::vector<Tensor>& all_params)
    : params_(std::move(params)) {
  MT_CHECK(!params_.empty(), "a gradient bucket needs at least one parameter");
  for (size_t p : params_) {
    const Tensor& t = all_params.at(p);
    MT_CHECK(t.dtype() == core::DType::Float32, "S-SGD reduces float32 gradients; parameter ", p,
             " is ", core::dtype_name(t.dtype()));
    offsets_.push_back(numel_);
    numel_ += t.numel();
  }
  if (params_.size() > 1)
    buffer_ = Tensor::zeros({numel_}, core::DType::Float32, all_params[params_[0]].device());
  arrived_.assign(params_.size(), false);
  reset();
}

void Bucket::reset() {
  pending_ = params_.size();
  std::fill(arrived_.begin(), arrived_.end(), false);
  launched = false;
  completion_seen = false;
  work.reset();
}

bool Bucket::add(size_t param, const Tensor& grad) {
  const auto it = std::find(params_.begin(), params_.end(), param);
  MT_CHECK(it != params_.end(), "parameter ", param, " is not in this bucket");
  const size_t k = static_cast<size_t>(it - params_.begin());
  MT_CHECK(!arrived_[k], "the gradient of parameter ", param,
           " became ready twice in one iteration (backward called twice without a step?)");
  arrived_[k] = true;
  if (buffer_.defined()) {
    core::NoGradGuard no_grad;
    buffer_.narrow(0, offsets_[k], grad.numel()).copy_(grad.contiguous().view({-1}));
  }
  return --pending_ == 0;
}

std::vector<size_t> Bucket::add_missing(const std::vector<Tensor>& all_params) {
  std::vector<size_t> missing;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (arrived_[k]) continue;
    Tensor p = all_params[params_[k]];
    if (!p.grad().defined()) p.set_grad(Tensor::zeros_like(p));
    add(params_[k], p.grad());
    missing.push_back(params_[k]);
  }
  return missing;
}

Tensor Bucket::payload(const std::vector<Tensor>& all_params) const {
  if (buffer_.defined()) return buffer_;
  Tensor g = all_params[params_[0]].grad();
  MT_CHECK(g.defined() && g.is_contiguous(), "parameter ", params_[0],
           " has no contiguous gradient to reduce");
  return g;
}

void Bucket::write_back(const std::vector<Tensor>& all_params) {
  if (!buffer_.defined()) return;  // the gradient itself was exchanged
  core::NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor g = all_params[params_[k]].grad();
    g.copy_(buffer_.narrow(0, offsets_[k], g.numel()));
  }
}

}  // namespace mt::dist
