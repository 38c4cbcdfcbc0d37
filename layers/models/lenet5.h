// LeNet-5 (LeCun et al. 1998) in its common modern form: ReLU and max pooling instead of the
// original's scaled tanh and trainable subsampling.
//
//   conv1 5x5 -> 6 ch, padding 2 -> relu -> maxpool 2
//   conv2 5x5 -> 16 ch           -> relu -> maxpool 2
//   fc1 -> 120 -> relu -> fc2 -> 84 -> relu -> fc3 -> num_classes
//
// The padding of conv1 makes a 28x28 input give conv2 the 14x14 map the 32x32 original got,
// so fc1 sees 16 x 5 x 5 features; for other sizes fc1's input is computed from image_size
// (16 x 6 x 6 for 32x32 CIFAR images).
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace mt::layers {

class LeNet5 : public Module {
 public:
  LeNet5(int64_t in_channels, int64_t image_size, int64_t num_classes, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in_channels, S, S] -> [N, num_classes]
  std::string type_name() const override { return "LeNet5"; }

 private:
  int64_t in_channels_, image_size_;
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<Linear> fc1_, fc2_, fc3_;
};

}  // namespace mt::layers
