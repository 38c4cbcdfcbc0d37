// Flat views of a parameter list: all parameters' values (or gradients) concatenated into one
// float32 vector in parameter order, and back. Compressed exchanges work on one flat buffer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/process_group.h"
#include "layers/module.h"

namespace mt::dist {

using core::Tensor;

int64_t total_numel(const std::vector<Tensor>& params);
Tensor flatten_values(const std::vector<Tensor>& params);
// Missing gradients (parameter unused this iteration) count as zeros.
Tensor flatten_grads(const std::vector<Tensor>& params);
void unflatten_into_values(const Tensor& flat, const std::vector<Tensor>& params);
// Sets every parameter's gradient to its slice of flat (allocating where there was none).
void unflatten_into_grads(const Tensor& flat, const std::vector<Tensor>& params);

// The same copies with one pass over the values each, for loops that run every iteration
// (CD-SGD's step): no zero fill first, no copy of a gradient that can be a view.
// The values of params[first, last) concatenated into a new float32 vector.
Tensor gather_values(const std::vector<Tensor>& params, size_t first, size_t last);
// Every parameter's values into its slice of `flat` (total_numel values, written in place).
void flatten_values_into(const std::vector<Tensor>& params, Tensor& flat);
// Sets every parameter's gradient to its slice of `flat` itself, not a copy (a copy on the
// parameter's device where that differs): an optimizer step then reads flat directly, and may
// scale it in place (clipping). The caller drops the gradients (zero_grad) before the next
// backward, so nothing accumulates into flat.
void view_as_grads(const Tensor& flat, const std::vector<Tensor>& params);

// A model's state as one flat float32 vector: its parameters, then its float32 buffers
// (batch-norm statistics). The algorithms that average models rather than gradients (DS-Sync,
// local SGD) exchange it in one allreduce, and show the world average for evaluation while this
// rank's own weights wait aside.
class ModelVector {
 public:
  ModelVector() = default;
  ModelVector(const layers::Module& model, std::vector<Tensor> params);

  int64_t numel() const { return numel_; }
  core::Device device() const { return tensors_.empty() ? core::Device::cpu() : tensors_[0].device(); }
  Tensor flatten() const;
  void unflatten(const Tensor& flat);
  // In place: every rank of `group` ends with the group's mean (`what` names it in errors).
  void average_over(ProcessGroup& group, const std::string& what);

  // Evaluation: this rank's weights go aside and the model shows the mean over `group`;
  // show_local() puts them back (nothing to do when nothing is aside).
  void show_average(ProcessGroup& group, const std::string& what);
  void show_local();
  bool showing_average() const { return aside_.defined(); }
  const Tensor& aside() const { return aside_; }  // this rank's weights while showing the average
  void drop_aside() { aside_ = Tensor(); }         // the model's values are this rank's from now

 private:
  std::vector<Tensor> tensors_;
  int64_t numel_ = 0;
  Tensor aside_;
};

}  // namespace mt::dist
