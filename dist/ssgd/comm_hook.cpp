#include "dist/ssgd/comm_hook.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/compress/compressor.h"

namespace mt::dist {

std::string GradBucket::describe() const {
  return "gradient bucket " + std::to_string(index) + " (" + std::to_string(params.size()) + " tensors, " +
         std::to_string(grad.numel()) + " values)";
}

std::vector<std::string> comm_hook_names() { return {"allreduce", "fp16", "bf16", "powersgd"}; }

namespace {

class AllreduceHook final : public CommHook {
 public:
  explicit AllreduceHook(std::shared_ptr<ProcessGroup> group) : CommHook({}), group_(std::move(group)) {}

  std::shared_ptr<Work> send(const GradBucket& bucket) override {
    Tensor grad = bucket.grad;
    return works_[bucket.index] = group_->allreduce(grad, ReduceOp::Sum);
  }
  void finish(const GradBucket& bucket) override {
    dist::finish(works_.at(bucket.index), *group_, "allreduce of " + bucket.describe());
    core::NoGradGuard no_grad;
    Tensor(bucket.grad).mul_(1.0f / static_cast<float>(group_->size()));
  }
  void set_layout(const std::vector<std::vector<size_t>>& layout, const std::vector<Tensor>&) override {
    works_.assign(layout.size(), nullptr);
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::shared_ptr<Work>> works_;  // per bucket, this iteration's
};

// fp16 and bf16: the same exchange in another 16-bit format.
class HalfHook final : public CommHook {
 public:
  // Each rank's value is rounded before the sum: not the exact average.
  HalfHook(std::shared_ptr<ProcessGroup> group, std::unique_ptr<Compressor> format)
      : CommHook({.name = format->name(), .exact_average = false}),
        group_(std::move(group)),
        format_(std::move(format)) {
    MT_CHECK(group_ != nullptr, "a communication hook needs a process group");
  }

  std::shared_ptr<Work> send(const GradBucket& bucket) override {
    core::NoGradGuard no_grad;
    // Divided before the sum, as PyTorch does: N gradients summed in float16 overflow sooner.
    Tensor(bucket.grad).mul_(1.0f / static_cast<float>(group_->size()));
    Slot& slot = slots_.at(bucket.index);
    slot.half = format_->compress(bucket.grad.reshape({-1}));
    slot.work = group_->allreduce(slot.half, ReduceOp::Sum);
    return slot.work;
  }
  void finish(const GradBucket& bucket) override {
    Slot& slot = slots_.at(bucket.index);
    dist::finish(slot.work, *group_, name() + " allreduce of " + bucket.describe());
    core::NoGradGuard no_grad;
    Tensor(bucket.grad).copy_(format_->decompress(slot.half, bucket.grad.numel()));
    slot = {};
  }
  void set_layout(const std::vector<std::vector<size_t>>& layout, const std::vector<Tensor>&) override {
    slots_.assign(layout.size(), {});
  }

 private:
  struct Slot {
    Tensor half;
    std::shared_ptr<Work> work;
  };
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<Compressor> format_;  // round to nearest even, both devices
  std::vector<Slot> slots_;  // per bucket, this iteration's message
};

}  // namespace

std::unique_ptr<CommHook> make_allreduce_hook(std::shared_ptr<ProcessGroup> group) {
  MT_CHECK(group != nullptr, "a communication hook needs a process group");
  return std::make_unique<AllreduceHook>(std::move(group));
}

std::unique_ptr<CommHook> make_fp16_hook(std::shared_ptr<ProcessGroup> group) {
  return std::make_unique<HalfHook>(std::move(group), make_fp16_compressor());
}

std::unique_ptr<CommHook> make_bf16_hook(std::shared_ptr<ProcessGroup> group) {
  return std::make_unique<HalfHook>(std::move(group), make_bf16_compressor());
}

}  // namespace mt::dist
