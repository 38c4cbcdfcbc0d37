#include "layers/models/lenet5.h"

#include "core/ops/nn.h"

namespace mt::layers {

LeNet5::LeNet5(int64_t in_channels, int64_t image_size, int64_t num_classes, core::Generator& gen)
    : in_channels_(in_channels), image_size_(image_size) {
  // Spatial size after each stage: conv1 keeps it (padding 2), pooling halves (floor),
  // conv2 (5x5, no padding) removes 4.
  const int64_t after_conv2 = image_size / 2 - 4;
  MT_CHECK(after_conv2 >= 2, "LeNet5: image_size ", image_size,
           " is too small; it needs at least 12x12 inputs (28 or 32 are usual)");
  const int64_t side = after_conv2 / 2;
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(Conv2dLayerOptions{in_channels, 6, 5, 1, 2, true}, gen));
  conv2_ = register_module("conv2", std::make_shared<Conv2d>(Conv2dLayerOptions{6, 16, 5, 1, 0, true}, gen));
  fc1_ = register_module("fc1", std::make_shared<Linear>(16 * side * side, 120, gen));
  fc2_ = register_module("fc2", std::make_shared<Linear>(120, 84, gen));
  fc3_ = register_module("fc3", std::make_shared<Linear>(84, num_classes, gen));
}

Tensor LeNet5::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == in_channels_ && x.size(2) == image_size_ && x.size(3) == image_size_,
           "LeNet5: built for [N, ", in_channels_, ", ", image_size_, ", ", image_size_, "] inputs, got ", x.str(),
           "; build it with matching in_channels / image_size");
  Tensor h = core::max_pool2d(core::relu(conv1_->forward(x)), 2, 2);
  h = core::max_pool2d(core::relu(conv2_->forward(h)), 2, 2);
  h = core::relu(fc1_->forward(h.flatten(1)));
  h = core::relu(fc2_->forward(h));
  return fc3_->forward(h);
}

}  // namespace mt::layers
