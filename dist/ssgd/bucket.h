// Bucket: the gradients of one or more parameters sent as one message. With several parameters
// (tensor fusion, MG-WFBP merged layers), each gradient is copied into a persistent flat buffer
// the moment it is ready, the communication hook (comm_hook.h) exchanges the buffer as one
// message and leaves the average in it, and the averages are copied back; with one parameter
// (WFBP) the gradient itself is the buffer. One message instead of many saves the per-message
// start-up cost alpha of the network.
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
  // Gradient of all_params[param] is final: copies it into the buffer (when fused). Returns
  // true when it was the last one missing, i.e. the bucket is ready to send.
  bool add(size_t param, const Tensor& grad);
  size_t pending() const { return pending_; }
  // Step time: parameters whose gradient never arrived (unused this iteration) contribute
  // zeros, so every rank still sends the same messages. Returns those parameters.
  std::vector<size_t> add_missing(const std::vector<Tensor>& all_params);
  // The tensor the hook exchanges: the flat buffer, or the single gradient.
  Tensor payload(const std::vector<Tensor>& all_params) const;
  // After the hook left the average in the payload: every parameter's gradient = its part.
  void write_back(const std::vector<Tensor>& all_params);

  // Communication state, owned by the synchronizer.
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
