// Communication hooks, after PyTorch DDP's: *what* travels for one bucket of S-SGD (the schedule
// decides when). send starts the exchange and returns it; finish waits and leaves the average in
// the bucket. Dense, 16-bit, low-rank and compressed S-SGD are one synchronizer with five hooks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/serialize.h"
#include "core/tensor.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

// One bucket as a hook sees it.
struct GradBucket {
  size_t index = 0;            // the bucket's position in launch order, the same on every rank
  Tensor grad;                 // flat float32, this rank's gradients; finish writes the average here
  std::vector<Tensor> params;  // the bucket's parameters, in the same order
  std::string describe() const;  // "gradient bucket 2 (3 tensors, 1024 values)", for errors
};

// What a kind of hook makes the synchronizer answer the trainer (synchronizer.h).
struct HookTraits {
  std::string name;  // in the synchronizer's name ("ssgd/two_bit(tau=0.500000)"); "" for the default
  bool exact_average = true;  // steps_on_gradient_average
  bool takes_over_momentum = false;
  bool keeps_state_per_rank = false;
};

class CommHook {
 public:
  explicit CommHook(HookTraits traits) : traits_(std::move(traits)) {}
  virtual ~CommHook() = default;
  const std::string& name() const { return traits_.name; }
  bool exact_average() const { return traits_.exact_average; }
  bool takes_over_momentum() const { return traits_.takes_over_momentum; }
  bool keeps_state_per_rank() const { return traits_.keeps_state_per_rank; }
  // The buckets (parameter indices) at setup and at every rebuild; per-bucket state carries over.
  virtual void set_layout(const std::vector<std::vector<size_t>>& layout, const std::vector<Tensor>& params) {}
  virtual std::shared_ptr<Work> send(const GradBucket& bucket) = 0;
  virtual void finish(const GradBucket& bucket) = 0;
  // After every bucket of the iteration has finished (before the optimizer step).
  virtual void end_iteration() {}

  virtual std::string epoch_summary() { return ""; }
  // Collective: every rank's state to rank 0 before a checkpoint (replicas.h).
  virtual void prepare_checkpoint() {}
  virtual void append_state(core::StateDict& state) const {}
  // After set_layout; entries the hook does not know are ignored.
  virtual void load_state(const core::StateDict& state) {}

 private:
  HookTraits traits_;
};

// sum over ranks / N, in place, float32: the default.
std::unique_ptr<CommHook> make_allreduce_hook(std::shared_ptr<ProcessGroup> group);
// grad / N sent as float16 (halves the bytes; no error feedback, so no state), summed by the
// allreduce and widened back: PyTorch's fp16_compress_hook.
std::unique_ptr<CommHook> make_fp16_hook(std::shared_ptr<ProcessGroup> group);
// The same in bfloat16 (float32's range, 8 significant bits): PyTorch's bf16_compress_hook.
std::unique_ptr<CommHook> make_bf16_hook(std::shared_ptr<ProcessGroup> group);
// PowerSGD (powersgd_hook.h) is the fourth.
std::vector<std::string> comm_hook_names();  // dist.ssgd.hook: "allreduce", "fp16", "bf16", "powersgd"

}  // namespace mt::dist
