// A model's state as one flat float32 vector: its parameters, then its float32 buffers
// (batch-norm statistics). The algorithms that average models rather than gradients (DS-Sync,
// local SGD) exchange it in one allreduce, and show the world average for evaluation while this
// rank's own weights wait aside.
#pragma once
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "layers/module.h"

namespace mt::dist {

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
