#include "optim/adam.h"

#include <cmath>
#include <string>

#include "core/grad_mode.h"
#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cuda/adam_update.h"  // adam_element: plain C++, shared with the CUDA kernel

namespace mt::optim {

namespace {

const std::string kExpAvg = "exp_avg.";
const std::string kExpAvgSq = "exp_avg_sq.";
const std::string kStep = "step.";

void check_options(const AdamOptions& o, const char* name) {
  MT_CHECK(o.lr >= 0, name, ": lr must be >= 0, got ", o.lr);
  MT_CHECK(o.beta1 >= 0 && o.beta1 < 1, name, ": beta1 must be in [0, 1), got ", o.beta1);
  MT_CHECK(o.beta2 >= 0 && o.beta2 < 1, name, ": beta2 must be in [0, 1), got ", o.beta2);
  MT_CHECK(o.eps >= 0, name, ": eps must be >= 0, got ", o.eps);
  MT_CHECK(o.weight_decay >= 0, name, ": weight_decay must be >= 0, got ", o.weight_decay);
}

// The CPU update, one pass over the parameter. GCC vectorizes it only with -fno-math-errno
// (sqrtf's errno for negative inputs, which v never is, counts as a side effect otherwise), and
// with each thread's own copy of `u` (firstprivate: a float store could alias a shared one); the
// clones give the square root and division the core's full vector width (docs/PERF.md).
MT_VECTOR_CLONES void adam_cpu(float* p, const float* g, float* m, float* v, int64_t n, core::cuda::AdamUpdate u) {
#pragma omp parallel for schedule(static) if (n > (1 << 16)) firstprivate(u)
  for (int64_t k = 0; k < n; ++k) core::cuda::adam_element(p[k], g[k], m[k], v[k], u);
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions opt)
    : Optimizer(std::move(params), opt.lr),
      opt_(opt),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      steps_(params_.size(), 0) {
  check_options(opt_, name());
  MT_CHECK(!params_.empty(), name(), ": empty parameter list; pass model.parameters()");
  for (size_t i = 0; i < params_.size(); ++i) {
    MT_CHECK(params_[i].defined(), name(), ": parameter ", i, " is an undefined tensor");
    MT_CHECK(params_[i].dtype() == core::DType::Float32, name(), ": parameter ", i, " is ",
             params_[i].str(), "; only float32 parameters are supported");
  }
}

void Adam::step() {
  core::NoGradGuard no_grad;
  // lr may have changed since the last step (set_lr by the schedule), so it is checked here.
  MT_CHECK(lr_ >= 0, name(), ": lr must be >= 0, got ", lr_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // frozen or unused this iteration: weight, moments and count stay
    MT_CHECK(g.device() == p.device(), name(), ": parameter ", i, " is on ", p.device().str(),
             " but its gradient is on ", g.device().str());
    MT_CHECK(p.is_contiguous(), name(), ": parameter ", i, " (", p.str(), ") is not contiguous");
    MT_CHECK(g.numel() == p.numel(), name(), ": parameter ", i, " (", p.str(), ") has a gradient of ",
             g.str());
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::zeros(p.shape(), core::DType::Float32, p.device());
      exp_avg_sq_[i] = Tensor::zeros(p.shape(), core::DType::Float32, p.device());
    }
    const int64_t t = ++steps_[i];

    // The constants in double, rounded to float once (see AdamUpdate).
    core::cuda::AdamUpdate u;
    const double wd = opt_.weight_decay;
    u.l2 = opt_.decoupled_weight_decay ? 0.0f : static_cast<float>(wd);
    u.shrink = opt_.decoupled_weight_decay ? static_cast<float>(1.0 - lr_ * wd) : 1.0f;
    u.beta1_weight = static_cast<float>(1.0 - opt_.beta1);
    u.beta2 = static_cast<float>(opt_.beta2);
    u.beta2_weight = static_cast<float>(1.0 - opt_.beta2);
    u.step_size = static_cast<float>(lr_ / (1.0 - std::pow(opt_.beta1, static_cast<double>(t))));
    u.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(opt_.beta2, static_cast<double>(t))));
    u.eps = static_cast<float>(opt_.eps);

    const Tensor grad = g.contiguous();
    if (p.device().is_cpu()) {
      adam_cpu(p.data<float>(), grad.data<float>(), exp_avg_[i].data<float>(),
               exp_avg_sq_[i].data<float>(), p.numel(), u);
      continue;
    }
#ifdef MT_CUDA_KERNELS
    if (p.device().is_cuda()) {
      core::cuda::adam_update(p, grad, exp_avg_[i], exp_avg_sq_[i], u);
      continue;
    }
#endif
    MT_FAIL(name(), ": parameter ", i, " is on ", p.device().str(),
            ", and this build has no Adam kernel for that device");
  }
}

core::StateDict Adam::state_dict() const {
  core::StateDict out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    const std::string idx = std::to_string(i);
    out.emplace_back(kExpAvg + idx, exp_avg_[i]);
    out.emplace_back(kExpAvgSq + idx, exp_avg_sq_[i]);
    out.emplace_back(kStep + idx, Tensor::from_vector(std::vector<int64_t>{steps_[i]}, {1}));
  }
  return out;
}

void Adam::load_state_dict(const core::StateDict& state) {
  const size_t n = params_.size();
  std::vector<Tensor> exp_avg(n), exp_avg_sq(n);
  std::vector<int64_t> steps(n, 0);
  std::vector<bool> has_step(n, false);
  for (const auto& [entry, t] : state) {
    std::string prefix;
    size_t idx = 0;
    const bool known = split_state_entry(entry, prefix, idx) &&
                       (prefix == kExpAvg || prefix == kExpAvgSq || prefix == kStep);
    MT_CHECK(known, name(), " state: unexpected entry '", entry, "'; ",
             name(), " state holds only 'exp_avg.<index>', 'exp_avg_sq.<index>' and 'step.<index>' "
             "(was it saved by another optimizer?)");
    MT_CHECK(idx < n, name(), " state: '", entry, "' but this optimizer has only ", n,
             " parameters; was it saved for another model?");
    if (prefix == kStep) {
      MT_CHECK(t.dtype() == core::DType::Int64 && t.numel() == 1, name(), " state: '", entry,
               "' is ", t.str(), ", expected one int64 step count");
      steps[idx] = t.to(core::Device::cpu()).contiguous().data<int64_t>()[0];
      MT_CHECK(steps[idx] >= 1, name(), " state: '", entry, "' holds step count ", steps[idx],
               "; a saved parameter state has at least one step");
      has_step[idx] = true;
      continue;
    }
    MT_CHECK(t.shape() == params_[idx].shape(), name(), " state: '", entry, "' has shape ",
             core::shape_str(t.shape()), " but parameter ", idx, " has shape ",
             core::shape_str(params_[idx].shape()));
    MT_CHECK(t.dtype() == core::DType::Float32, name(), " state: '", entry, "' is ", t.str(),
             ", expected float32");
    // A private copy on the parameter's device: the caller's tensors may be reused or freed.
    (prefix == kExpAvg ? exp_avg : exp_avg_sq)[idx] = t.detach().contiguous().to(params_[idx].device()).clone();
  }
  for (size_t i = 0; i < n; ++i) {
    const int present = int(exp_avg[i].defined()) + int(exp_avg_sq[i].defined()) + int(has_step[i]);
    MT_CHECK(present == 0 || present == 3, name(), " state for parameter ", i, " is incomplete: ",
             exp_avg[i].defined() ? "" : "'exp_avg." + std::to_string(i) + "' ",
             exp_avg_sq[i].defined() ? "" : "'exp_avg_sq." + std::to_string(i) + "' ",
             has_step[i] ? "" : "'step." + std::to_string(i) + "' ",
             "missing (the three entries are saved together)");
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  steps_ = std::move(steps);
}

}  // namespace mt::optim
