#include "dist/ssgd/compressing_hook.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/flat.h"
#include "dist/compress/gradient_exchange.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

class CompressingHook final : public CommHook {
 public:
  CompressingHook(std::shared_ptr<ProcessGroup> group, CompressingHookOptions options)
      : CommHook({.name = make_compressor(options.compression)->name() +
                          (options.momentum_correction ? "+momentum-correction" : ""),
                  .exact_average = false,
                  .takes_over_momentum = options.momentum_correction.has_value(),
                  .keeps_state_per_rank = true}),
        group_(std::move(group)),
        options_(std::move(options)) {
    MT_CHECK(group_ != nullptr, "a communication hook needs a process group");
  }

  void set_layout(const std::vector<std::vector<size_t>>& layout, const std::vector<Tensor>& params) override {
    // The residuals and velocities so far, in parameter order, go over to the new buckets.
    std::optional<core::StateDict> carried;
    if (!exchanges_.empty()) carried = own_state();
    layout_ = layout;
    param_numel_.clear();
    param_offset_.clear();
    int64_t total = 0;
    for (const auto& p : params) {
      param_offset_.push_back(total);
      param_numel_.push_back(p.numel());
      total += p.numel();
    }
    total_numel_ = total;
    device_ = params.empty() ? core::Device::cpu() : params[0].device();
    exchanges_.clear();
    momentum_.clear();
    for (const auto& bucket : layout_) {
      int64_t n = 0;
      for (size_t p : bucket) n += param_numel_.at(p);
      exchanges_.push_back(std::make_unique<GradientExchange>(group_, make_compressor(options_.compression), n, device_));
      if (options_.momentum_correction)
        momentum_.push_back(std::make_unique<MomentumCorrection>(n, *options_.momentum_correction));
    }
    pending_.assign(layout_.size(), {});
    if (carried) load_own(*carried, "");
  }

  std::shared_ptr<Work> send(const GradBucket& bucket) override {
    GradientExchange& exchange = *exchanges_.at(bucket.index);
    exchange.warm_up(options_.compression, steps_);
    PendingExchange& e = pending_[bucket.index];
    if (momentum_.empty()) {
      e = exchange.launch(bucket.grad, /*full_precision=*/false);
      return e.work;
    }
    // Momentum correction: the velocity (host memory) advances with this rank's gradient and
    // weight decay, and travels instead of the gradient.
    MomentumCorrection& momentum = *momentum_[bucket.index];
    const core::Device cpu = core::Device::cpu();
    const Tensor direction =
        momentum.direction(bucket.grad.to(cpu), flatten_values(bucket.params)).to(bucket.grad.device());
    Tensor decoded;
    e = exchange.launch(direction, /*full_precision=*/false, &decoded);
    momentum.mask_sent(decoded.to(cpu));
    return e.work;
  }

  void finish(const GradBucket& bucket) override {
    const Tensor average = exchanges_.at(bucket.index)->wait(pending_[bucket.index]);
    core::NoGradGuard no_grad;
    Tensor(bucket.grad).copy_(average);
  }

  void end_iteration() override {
    ++steps_;
    ++iterations_since_summary_;
    rank_states_.forget();  // training went on: the collected states no longer describe the ranks
  }

  std::string epoch_summary() override {
    if (exchanges_.empty()) return "";
    ExchangeStats total;
    for (auto& exchange : exchanges_) {
      total.exchanges += exchange->stats().exchanges;
      total.bytes_sent += exchange->stats().bytes_sent;
      total.raw_bytes += exchange->stats().raw_bytes;
      total.wait_seconds += exchange->stats().wait_seconds;
      exchange->stats() = {};
    }
    const std::string s = describe_exchanges(exchanges_[0]->compressor().name(), total, iterations_since_summary_);
    iterations_since_summary_ = 0;
    return s.empty() ? s : "compressed S-SGD " + s;
  }

  void prepare_checkpoint() override {
    if (rank_states_.collected() || exchanges_.empty()) return;
    rank_states_.collect(*group_, own_state(), "compressed S-SGD checkpoint state");
  }

  void append_state(core::StateDict& state) const override {
    if (exchanges_.empty()) return;
    core::StateDict own = own_state();
    state.push_back(own[0]);  // residual
    state.emplace_back("steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1}));
    for (size_t i = 1; i < own.size(); ++i) state.push_back(own[i]);  // velocity, velocity_started
    rank_states_.append_to(state, "cssgd.");
  }

  void load_state(const core::StateDict& state) override {
    MT_CHECK(!exchanges_.empty() || total_numel_ == 0, "internal: load_state before set_layout");
    for (const auto& [name, t] : state)
      if (name == "steps") steps_ = t.item_int();
    load_own(state, "");
    // This rank's own residual and velocity, when the checkpoint has every rank's.
    if (const auto mine = rank_state(state, "cssgd.", group_->rank(), group_->size(), nullptr))
      load_own(*mine, " of rank " + std::to_string(group_->rank()));
  }

 private:
  // Per-bucket vectors (bucket order inside each) as one CPU vector in parameter order.
  Tensor to_param_order(const std::vector<Tensor>& per_bucket) const {
    Tensor flat = Tensor::zeros({total_numel_});
    for (size_t b = 0; b < layout_.size(); ++b) {
      const Tensor piece = per_bucket[b].to(core::Device::cpu()).contiguous().reshape({-1});
      int64_t off = 0;
      for (size_t p : layout_[b]) {
        flat.narrow(0, param_offset_[p], param_numel_[p]).copy_(piece.narrow(0, off, param_numel_[p]));
        off += param_numel_[p];
      }
    }
    return flat;
  }
  // And back: bucket b's piece of a parameter-order vector (on the CPU).
  Tensor bucket_piece(const Tensor& flat, size_t b) const {
    int64_t n = 0;
    for (size_t p : layout_[b]) n += param_numel_[p];
    Tensor piece = Tensor::zeros({n});
    int64_t off = 0;
    for (size_t p : layout_[b]) {
      piece.narrow(0, off, param_numel_[p]).copy_(flat.narrow(0, param_offset_[p], param_numel_[p]));
      off += param_numel_[p];
    }
    return piece;
  }

  // "residual", and with momentum correction "velocity" and "velocity_started".
  core::StateDict own_state() const {
    std::vector<Tensor> residuals;
    for (const auto& exchange : exchanges_) residuals.push_back(exchange->error_feedback().residual());
    core::StateDict state{{"residual", to_param_order(residuals)}};
    if (!momentum_.empty()) {
      std::vector<Tensor> velocities;
      for (const auto& m : momentum_) velocities.push_back(m->velocity());
      core::StateDict first;
      momentum_[0]->append_state(first);  // velocity_started: the same for every bucket
      state.emplace_back("velocity", to_param_order(velocities));
      state.emplace_back("velocity_started", first[1].second);
    }
    return state;
  }

  void load_own(const core::StateDict& state, const std::string& whose) {
    for (const auto& [name, t] : state) {
      if (name != "residual" && (name != "velocity" || momentum_.empty())) continue;
      const std::string what = name == "residual" ? "compression residual" : "momentum-correction velocity";
      MT_CHECK(t.numel() == total_numel_, "checkpoint: the ", what, whose, " holds ", t.numel(),
               " values, the model ", total_numel_);
      const Tensor flat = t.to(core::Device::cpu()).contiguous().reshape({total_numel_});
      for (size_t b = 0; b < layout_.size(); ++b) {
        if (name == "residual") {
          exchanges_[b]->error_feedback().residual().copy_(bucket_piece(flat, b));
        } else {
          core::StateDict piece{{"velocity", bucket_piece(flat, b)}};
          for (const auto& [n2, t2] : state)
            if (n2 == "velocity_started") piece.emplace_back(n2, t2);
          momentum_[b]->load_state(piece);
        }
      }
    }
  }

  std::shared_ptr<ProcessGroup> group_;
  CompressingHookOptions options_;
  std::vector<std::vector<size_t>> layout_;
  std::vector<int64_t> param_numel_, param_offset_;  // parameter order
  int64_t total_numel_ = 0;
  core::Device device_ = core::Device::cpu();
  std::vector<std::unique_ptr<GradientExchange>> exchanges_;  // per bucket: compressor, residual, statistics
  std::vector<std::unique_ptr<MomentumCorrection>> momentum_;  // per bucket, with momentum correction
  std::vector<PendingExchange> pending_;                      // per bucket, this iteration's message
  int64_t steps_ = 0;                                         // iterations exchanged (TOPK warm-up)
  int64_t iterations_since_summary_ = 0;
  RankStates rank_states_;  // every rank's residual and velocity (prepare_checkpoint)
};

}  // namespace

std::unique_ptr<CommHook> make_compressing_hook(std::shared_ptr<ProcessGroup> group, CompressingHookOptions options) {
  return std::make_unique<CompressingHook>(std::move(group), std::move(options));
}

}  // namespace mt::dist
