#include "optim/sgd.h"

#include <string>

#include "core/grad_mode.h"
#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cuda/sgd_update.h"  // sgd_element: plain C++, shared with the CUDA kernel

namespace mt::optim {

namespace {

const std::string kMomentumPrefix = "momentum.";

void check_options(const SgdOptions& o) {
  MT_CHECK(o.lr >= 0, "SGD: lr must be >= 0, got ", o.lr);
  MT_CHECK(o.momentum >= 0, "SGD: momentum must be >= 0, got ", o.momentum);
  MT_CHECK(o.dampening >= 0 && o.dampening <= 1, "SGD: dampening must be in [0, 1], got ", o.dampening);
  MT_CHECK(o.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  MT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: nesterov needs momentum > 0 and dampening 0 (got momentum ", o.momentum,
           ", dampening ", o.dampening, "); set a momentum or turn nesterov off");
}

// The CPU update, one pass over the parameter; sgd_element is the CUDA kernel's arithmetic too,
// in float like PyTorch's CPU kernel. One loop per case, each with its own copy of `u`
// (firstprivate): a store through p could otherwise alias u's floats as far as the compiler
// knows, which keeps it from hoisting the constants and from vectorizing (docs/PERF.md).
MT_VECTOR_CLONES void sgd_cpu(float* p, const float* g, float* buf, int64_t n, bool first,
                              core::cuda::SgdUpdate u) {
  if (buf == nullptr) {
#pragma omp parallel for schedule(static) if (n > (1 << 16)) firstprivate(u)
    for (int64_t k = 0; k < n; ++k) {
      float unused = 0.0f;  // no momentum: sgd_element leaves the buffer alone
      core::cuda::sgd_element(p[k], g[k], unused, false, u);
    }
  } else if (first) {
#pragma omp parallel for schedule(static) if (n > (1 << 16)) firstprivate(u)
    for (int64_t k = 0; k < n; ++k) core::cuda::sgd_element(p[k], g[k], buf[k], true, u);
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16)) firstprivate(u)
    for (int64_t k = 0; k < n; ++k) core::cuda::sgd_element(p[k], g[k], buf[k], false, u);
  }
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SgdOptions opt)
    : Optimizer(std::move(params), opt.lr), opt_(opt), momentum_(params_.size()) {
  check_options(opt_);
  MT_CHECK(!params_.empty(), "SGD: empty parameter list; pass model.parameters()");
  for (size_t i = 0; i < params_.size(); ++i) {
    MT_CHECK(params_[i].defined(), "SGD: parameter ", i, " is an undefined tensor");
    MT_CHECK(params_[i].dtype() == core::DType::Float32, "SGD: parameter ", i, " is ",
             params_[i].str(), "; only float32 parameters are supported");
  }
}

void SGD::step() {
  core::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // frozen or unused this iteration: leave weight and buffer alone
    MT_CHECK(g.device() == p.device(), "SGD: parameter ", i, " is on ", p.device().str(),
             " but its gradient is on ", g.device().str());
    // CPU and CUDA parameters get a fused one-pass update; a CUDA tensor exists only in builds
    // with the CUDA kernels.
    if (p.device().is_cpu()) {
      step_cpu(i, p, g);
      continue;
    }
#ifdef MT_CUDA_KERNELS
    if (p.device().is_cuda()) {
      MT_CHECK(p.is_contiguous(), "SGD: parameter ", i, " (", p.str(), ") is not contiguous");
      const core::cuda::SgdUpdate u = update_constants();
      const bool first = u.momentum != 0.0f && !momentum_[i].defined();
      if (first) momentum_[i] = Tensor::empty(p.shape(), core::DType::Float32, p.device());
      core::cuda::sgd_update(p, g.contiguous(), momentum_[i], first, u);
      continue;
    }
#endif
    MT_FAIL("SGD: parameter ", i, " is on ", p.device().str(), ", and this build has no SGD kernel for that device");
  }
}

void SGD::step_cpu(size_t i, Tensor& param, const Tensor& grad_in) {
  MT_CHECK(param.is_contiguous(), "SGD: parameter ", i, " (", param.str(), ") is not contiguous");
  const Tensor grad = grad_in.contiguous();
  const core::cuda::SgdUpdate u = update_constants();
  const bool first = u.momentum != 0.0f && !momentum_[i].defined();
  if (first) momentum_[i] = Tensor::empty(param.shape());
  float* buf = u.momentum != 0.0f ? momentum_[i].data<float>() : nullptr;
  sgd_cpu(param.data<float>(), grad.data<float>(), buf, param.numel(), first, u);
}

core::cuda::SgdUpdate SGD::update_constants() const {
  // Folded once per step, in double, and rounded to float once.
  core::cuda::SgdUpdate u;
  u.lr = static_cast<float>(lr_);
  const float wd = static_cast<float>(opt_.weight_decay);
  u.l2 = opt_.decoupled_weight_decay ? 0.0f : wd;
  u.shrink = opt_.decoupled_weight_decay ? 1.0f - u.lr * wd : 1.0f;
  u.momentum = static_cast<float>(opt_.momentum);
  u.keep = 1.0f - static_cast<float>(opt_.dampening);
  u.nesterov = opt_.nesterov;
  return u;
}

core::StateDict SGD::state_dict() const {
  core::StateDict out;
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) out.emplace_back(kMomentumPrefix + std::to_string(i), momentum_[i]);
  return out;
}

void SGD::load_state_dict(const core::StateDict& state) {
  std::vector<Tensor> loaded(params_.size());
  for (const auto& [name, t] : state) {
    std::string prefix;
    size_t idx = 0;
    MT_CHECK(split_state_entry(name, prefix, idx) && prefix == kMomentumPrefix, "SGD state: unexpected entry '",
             name, "'; SGD state holds only 'momentum.<index>'");
    MT_CHECK(idx < params_.size(), "SGD state: '", name, "' but this optimizer has only ",
             params_.size(), " parameters; was it saved for another model?");
    MT_CHECK(t.shape() == params_[idx].shape(), "SGD state: '", name, "' has shape ",
             core::shape_str(t.shape()), " but parameter ", idx, " has shape ",
             core::shape_str(params_[idx].shape()));
    MT_CHECK(t.dtype() == core::DType::Float32, "SGD state: '", name, "' is ", t.str(), ", expected float32");
    // A private copy on the parameter's device: the caller's tensors may be reused or freed.
    loaded[idx] = t.detach().contiguous().to(params_[idx].device()).clone();
  }
  momentum_ = std::move(loaded);
}

}  // namespace mt::optim
