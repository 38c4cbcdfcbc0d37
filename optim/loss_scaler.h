// Loss scaling for float16 training (precision "fp16", core/precision.h).
//
// float16's smallest subnormal is 2^-24 (~6e-8): many gradients are smaller and would round to
// zero in the half-precision products of the backward pass. Multiplying the loss by a scale S
// before backward multiplies every gradient by S (backward is linear), lifting them into
// float16's range; dividing the float32 gradients by S before the optimizer step ("unscaling")
// undoes it exactly when S is a power of two.
//
// Too large a scale overflows instead: some gradient becomes Inf/NaN. Dynamic scaling finds the
// largest safe scale as it goes: a step whose gradients are not all finite is skipped (weights
// and optimizer state untouched) and S is multiplied by backoff_factor; after growth_interval
// good steps in a row S is multiplied by growth_factor to probe upwards again. An overflow at
// the minimum scale (scaling can no longer help) is a genuinely bad step, which the step guard
// reports like any NaN/Inf gradient. Static scaling keeps S fixed (every overflow is then bad).
//
// The state (scale, good steps in a row, overflow count) goes into checkpoints, so a resumed run
// starts from the scale it had learned instead of overflowing its way down again.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mt::optim {

struct LossScalerOptions {
  bool dynamic = true;           // false: static (the scale never changes)
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;    // > 1
  double backoff_factor = 0.5;   // in (0, 1)
  int64_t growth_interval = 2000;  // good steps in a row before growing; >= 1
  // The scale is never lowered below this; an overflow at it is a bad step. Below 1 scaling
  // would shrink gradients, which cannot help values that overflow anyway.
  double min_scale = 1.0;
};

// What a checkpoint keeps of a scaler.
struct LossScalerState {
  double scale = 1.0;
  int64_t good_steps = 0;      // good steps since the last overflow or growth
  int64_t overflow_steps = 0;  // steps skipped because of an overflow, since the run started
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  bool dynamic() const { return options_.dynamic; }
  const LossScalerOptions& options() const { return options_; }
  // True when an overflow can no longer lower the scale (static mode, or at min_scale).
  bool at_minimum() const { return !options_.dynamic || scale_ <= options_.min_scale; }
  int64_t good_steps() const { return good_steps_; }
  int64_t overflow_steps() const { return overflow_steps_; }

  // Whether every gradient of `params` is finite (parameters without one are skipped).
  static bool grads_finite(const std::vector<core::Tensor>& params);
  // Divides every gradient by the scale in place, times `extra_factor` in the same pass (the
  // step guard folds gradient clipping into it).
  void unscale(const std::vector<core::Tensor>& params, double extra_factor = 1.0) const;
  // Records a step's outcome. overflow: the scale backs off (not below min_scale) and the
  // good-step count restarts; otherwise the count grows and, at growth_interval, the scale
  // grows. Static scalers only count.
  void update(bool overflow);

  LossScalerState state_dict() const { return {scale_, good_steps_, overflow_steps_}; }
  void load_state_dict(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t overflow_steps_ = 0;
};

}  // namespace mt::optim
