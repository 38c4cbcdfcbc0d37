#include "dist/ssgd/powersgd_hook.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/matmul.h"
#include "core/random.h"
#include "dist/compress/error_feedback.h"
#include "dist/compress/gradient_exchange.h"
#include "dist/flat.h"
#include "dist/replicas.h"

namespace mt::dist {

void orthogonalize_columns(float* p, int64_t n, int64_t r) {
  for (int64_t i = 0; i < r; ++i) {
    double norm = 0;
    for (int64_t k = 0; k < n; ++k) norm += double(p[k * r + i]) * p[k * r + i];
    norm = std::sqrt(norm);
    if (norm > 0)
      for (int64_t k = 0; k < n; ++k) p[k * r + i] = static_cast<float>(p[k * r + i] / norm);
    for (int64_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += double(p[k * r + i]) * p[k * r + j];
      for (int64_t k = 0; k < n; ++k) p[k * r + j] -= static_cast<float>(dot * p[k * r + i]);
    }
  }
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kQSeed = 20190501;  // every rank draws the same first Q

// A parameter as PowerSGD sees it: an n x m matrix of rank r when compressed.
struct Matrix {
  int64_t numel = 0, n = 0, m = 0, r = 0;
  bool compressed = false;
};

class PowerSgdHook final : public CommHook {
 public:
  PowerSgdHook(std::shared_ptr<ProcessGroup> group, PowerSgdOptions options)
      : CommHook({.name = "powersgd(rank=" + std::to_string(options.rank) + ")",
                  .exact_average = false,
                  .keeps_state_per_rank = true}),
        group_(std::move(group)),
        options_(options) {
    MT_CHECK(group_ != nullptr, "a communication hook needs a process group");
    MT_CHECK(options_.rank >= 1 && options_.min_compression_rate > 0, "internal: PowerSGD options unchecked");
  }

  // The matrices, their Qs and residuals depend on the parameters only: a new layout keeps them.
  void set_layout(const std::vector<std::vector<size_t>>& layout, const std::vector<Tensor>& params) override {
    layout_ = layout;
    slots_.assign(layout.size(), {});
    if (matrices_.size() == params.size()) return;
    matrices_.clear();
    q_.clear();
    residual_.clear();
    for (size_t i = 0; i < params.size(); ++i) {
      Matrix x;
      x.numel = params[i].numel();
      if (params[i].dim() >= 2 && x.numel > 0) {
        x.n = params[i].shape()[0];
        x.m = x.numel / x.n;
        x.r = std::min<int64_t>({x.n, x.m, options_.rank});
        x.compressed = double(x.n + x.m) * double(x.r) * options_.min_compression_rate < double(x.numel);
      }
      matrices_.push_back(x);
      if (x.compressed) {
        core::Generator gen(kQSeed + i);
        q_.push_back(core::randn({x.m, x.r}, 0.0f, 1.0f, gen).to(params[i].device()));
      } else {
        q_.emplace_back();
      }
      residual_.emplace_back(x.compressed ? x.numel : 0, params[i].device());
    }
  }

  std::shared_ptr<Work> send(const GradBucket& bucket) override {
    core::NoGradGuard no_grad;
    Slot& s = slots_.at(bucket.index);
    s = {};
    ++stats_.exchanges;
    stats_.raw_bytes += 4.0 * bucket.grad.numel();
    if (iteration_ < options_.start_iter) {  // warm-up: the whole bucket as float32
      stats_.bytes_sent += 4.0 * bucket.grad.numel();
      s.dense = true;
      s.uncompressed = bucket.grad;
      return s.uncompressed_work = group_->allreduce(s.uncompressed, ReduceOp::Sum);
    }
    int64_t un = 0, pn = 0, qn = 0;
    for (size_t i : layout_.at(bucket.index)) {
      const Matrix& x = matrices_[i];
      pn += x.compressed ? x.n * x.r : 0;
      qn += x.compressed ? x.m * x.r : 0;
      un += x.compressed ? 0 : x.numel;
    }
    stats_.bytes_sent += 4.0 * static_cast<double>(un + pn + qn);
    s.qn = qn;
    const core::Device device = bucket.grad.device();
    s.uncompressed = Tensor::empty({un}, core::DType::Float32, device);
    s.p = Tensor::empty({pn}, core::DType::Float32, device);
    int64_t u = 0, p = 0;
    for_each_piece(bucket, [&](size_t i, Tensor piece) {
      const Matrix& x = matrices_[i];
      if (!x.compressed) {
        s.uncompressed.narrow(0, u, x.numel).copy_(piece);
        u += x.numel;
        return;
      }
      piece.copy_(residual_[i].corrected(piece));  // M + residual, kept in the bucket until finish
      s.p.narrow(0, p, x.n * x.r).copy_(core::matmul(piece.reshape({x.n, x.m}), q_[i]).reshape({-1}));
      p += x.n * x.r;
    });
    // The same collectives in the same order on every rank: the vectors, then P.
    if (un > 0 || pn == 0) s.uncompressed_work = group_->allreduce(s.uncompressed, ReduceOp::Sum);
    if (pn > 0) s.p_work = group_->allreduce(s.p, ReduceOp::Sum);
    return s.p_work ? s.p_work : s.uncompressed_work;
  }

  void finish(const GradBucket& bucket) override {
    core::NoGradGuard no_grad;
    Slot& s = slots_.at(bucket.index);
    const auto start = Clock::now();
    const float inv = 1.0f / static_cast<float>(group_->size());
    const std::string of = " of " + bucket.describe();
    if (s.p_work) finish_matrices(bucket, s, of);
    if (s.uncompressed_work) {
      dist::finish(s.uncompressed_work, *group_, (s.dense ? "allreduce" : "PowerSGD's uncompressed allreduce") + of);
      s.uncompressed.mul_(inv);
      int64_t u = 0;
      if (!s.dense) for_each_piece(bucket, [&](size_t i, Tensor piece) {
        if (matrices_[i].compressed) return;
        piece.copy_(s.uncompressed.narrow(0, u, matrices_[i].numel));
        u += matrices_[i].numel;
      });
    }
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    s = {};
  }

  void end_iteration() override {
    ++iteration_;
    rank_states_.forget();  // training went on: the collected residuals are no longer the ranks'
  }

  std::string epoch_summary() override {
    const int64_t buckets = std::max<int64_t>(1, static_cast<int64_t>(layout_.size()));
    const std::string s = describe_exchanges(name(), stats_, stats_.exchanges / buckets);
    stats_ = {};
    return s.empty() ? s : "S-SGD " + s;
  }

  void prepare_checkpoint() override {
    if (!rank_states_.collected())
      rank_states_.collect(*group_, {{"residual", flatten_values(residuals())}}, "PowerSGD checkpoint state");
  }

  void append_state(core::StateDict& state) const override {
    state.emplace_back("powersgd.iteration", Tensor::from_vector(std::vector<int64_t>{iteration_}, {1}));
    state.emplace_back("powersgd.q", flatten_values(qs()));
    state.emplace_back("powersgd.residual", flatten_values(residuals()));  // this rank's (rank 0's in a checkpoint)
    rank_states_.append_to(state, "powersgd.");
  }

  void load_state(const core::StateDict& state) override {
    if (const auto it = saved_int64(state, "powersgd.iteration")) iteration_ = *it;
    for (const auto& [name, t] : state) {
      if (name == "powersgd.q") load(t, qs(), name);
      if (name == "powersgd.residual") load(t, residuals(), name);
    }
    // This rank's own residual, when the checkpoint has every rank's.
    if (const auto mine = rank_state(state, "powersgd.", group_->rank(), group_->size(), nullptr))
      for (const auto& [name, t] : *mine)
        if (name == "residual") load(t, residuals(), "powersgd.rank" + std::to_string(group_->rank()) + ".residual");
  }

 private:
  struct Slot {
    bool dense = false;              // a warm-up iteration: the whole bucket in `uncompressed`
    Tensor uncompressed, p;          // summed by the allreduces
    int64_t qn = 0;                  // Q's values, sent after P
    std::shared_ptr<Work> uncompressed_work, p_work;
  };

  // fn(parameter index, its piece of the bucket) in bucket order. (A bucket of one parameter is
  // that gradient itself, in its shape.)
  template <typename Fn>
  void for_each_piece(const GradBucket& bucket, Fn fn) const {
    const Tensor flat = bucket.grad.reshape({-1});
    int64_t offset = 0;
    for (size_t i : layout_.at(bucket.index)) {
      fn(i, flat.narrow(0, offset, matrices_[i].numel));
      offset += matrices_[i].numel;
    }
  }

  // P arrived summed (orthogonalization removes the scale, as in PyTorch); Q = M^T P travels,
  // averaged, and M ≈ P Q^T replaces the gradient, the difference kept as the residual.
  void finish_matrices(const GradBucket& bucket, Slot& s, const std::string& of) {
    dist::finish(s.p_work, *group_, "PowerSGD's allreduce of P" + of);
    Tensor p = s.p.to(core::Device::cpu()).contiguous();
    for (int64_t off = 0; size_t i : layout_.at(bucket.index)) {
      const Matrix& x = matrices_[i];
      if (!x.compressed) continue;
      orthogonalize_columns(p.data<float>() + off, x.n, x.r);
      off += x.n * x.r;
    }
    p = p.to(s.p.device());
    Tensor q = Tensor::empty({s.qn}, core::DType::Float32, s.p.device());
    std::vector<Tensor> ps;
    int64_t po = 0, qo = 0;
    for_each_piece(bucket, [&](size_t i, Tensor piece) {
      const Matrix& x = matrices_[i];
      if (!x.compressed) return;
      ps.push_back(p.narrow(0, po, x.n * x.r).reshape({x.n, x.r}));
      const Tensor mt = piece.reshape({x.n, x.m}).transpose(0, 1).contiguous();
      q.narrow(0, qo, x.m * x.r).copy_(core::matmul(mt, ps.back()).reshape({-1}));
      po += x.n * x.r;
      qo += x.m * x.r;
    });
    dist::finish(group_->allreduce(q, ReduceOp::Sum), *group_, "PowerSGD's allreduce of Q" + of);
    q.mul_(1.0f / static_cast<float>(group_->size()));
    size_t k = 0;
    qo = 0;
    for_each_piece(bucket, [&](size_t i, Tensor piece) {
      const Matrix& x = matrices_[i];
      if (!x.compressed) return;
      q_[i] = q.narrow(0, qo, x.m * x.r).reshape({x.m, x.r}).clone();  // the next iteration's start
      const Tensor approx = core::matmul(ps[k++], q_[i].transpose(0, 1).contiguous()).reshape({-1});
      residual_[i].update(piece, approx);
      piece.copy_(approx);
      qo += x.m * x.r;
    });
  }

  // The shared Qs and this rank's residuals of the compressed matrices, in parameter order.
  std::vector<Tensor> qs() const {
    std::vector<Tensor> out;
    for (const Tensor& q : q_)
      if (q.defined()) out.push_back(q);
    return out;
  }
  std::vector<Tensor> residuals() const {
    std::vector<Tensor> out;
    for (const ErrorFeedback& e : residual_)
      if (e.numel() > 0) out.push_back(e.residual());
    return out;
  }
  // A checkpoint's flat entry into `parts` (tensors sharing the hook's storage).
  void load(const Tensor& t, const std::vector<Tensor>& parts, const std::string& name) const {
    MT_CHECK(t.numel() == total_numel(parts), "checkpoint: ", name, " holds ", t.numel(), " values, PowerSGD at rank ",
             options_.rank, " needs ", total_numel(parts), " for this model (written with another "
             "dist.ssgd.powersgd.rank or min_compression_rate?)");
    unflatten_into_values(t.reshape({-1}), parts);
  }

  std::shared_ptr<ProcessGroup> group_;
  PowerSgdOptions options_;
  std::vector<std::vector<size_t>> layout_;
  std::vector<Matrix> matrices_;         // per parameter
  std::vector<Tensor> q_;                // per parameter: m x r, the same on every rank; undefined if uncompressed
  std::vector<ErrorFeedback> residual_;  // per parameter: this rank's; empty if uncompressed
  std::vector<Slot> slots_;              // per bucket, this iteration's messages
  int64_t iteration_ = 0;                // iterations exchanged (start_iter)
  ExchangeStats stats_;
  RankStates rank_states_;  // every rank's residual (prepare_checkpoint)
};

}  // namespace

std::unique_ptr<CommHook> make_powersgd_hook(std::shared_ptr<ProcessGroup> group, PowerSgdOptions options) {
  return std::make_unique<PowerSgdHook>(std::move(group), options);
}

}  // namespace mt::dist
