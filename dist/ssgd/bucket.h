// Bucket: the gradients of one or more parameters sent as one message (saving the network's
// per-message cost), copied into one flat buffer as they arrive; with one parameter (WFBP) the
// gradient itself is the buffer.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

class Bucket {
 public:
  // params: indices into `all_params`, in the order their gradients are expected.
  Bucket(std::vector<size_t> params, const std::vector<Tensor>& all_params);

  const std::vector<size_t>& params() const { return params_; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * 4; }

  // Starts a new iteration: every gradient pending again.
  void reset();
  // Gradient of all_params[param] is final: into the buffer (when fused); true when it was the
  // last one missing.
  bool add(size_t param, const Tensor& grad);
  size_t pending() const { return pending_; }
  // At the end of backward: the parameters whose gradient never arrived count as zeros (every
  // rank sends the same messages); returns them.
  std::vector<size_t> add_missing(const std::vector<Tensor>& all_params);
  // The tensor the hook exchanges: the flat buffer, or the single gradient.
  Tensor payload(const std::vector<Tensor>& all_params) const;
  // After the hook left the average in the payload: every parameter's gradient = its part.
  void write_back(const std::vector<Tensor>& all_params);

  // The synchronizer's (the timeline's times too).
  std::shared_ptr<Work> work;
  bool launched = false;
  std::chrono::steady_clock::time_point launched_at, completed_at;
  bool completion_seen = false;

 private:
  std::vector<size_t> params_;
  std::vector<int64_t> offsets_;  // element offset of each parameter in buffer_
  int64_t numel_ = 0;
  Tensor buffer_;                 // defined only when the bucket holds several parameters
  std::vector<bool> arrived_;
  size_t pending_ = 0;
};

}  // namespace mt::dist
