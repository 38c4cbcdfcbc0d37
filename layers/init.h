// Weight initialization, with the formulas PyTorch uses, so models start from the same
// distribution as their PyTorch counterparts and reach comparable accuracy with the same recipe.
// Every helper draws from the Generator it is given: a model built twice from the same seed
// has the same weights.
//
//   fan_in  = in_channels * kh * kw  (in_features for a [out, in] matrix)
//   fan_out = out_channels * kh * kw
//   kaiming_uniform(a):  U(-b, b), b = gain * sqrt(3 / fan), gain = sqrt(2 / (1 + a^2))
//   kaiming_normal:      N(0, gain / sqrt(fan)), gain = sqrt(2) (ReLU)
//
// PyTorch's default Linear/Conv init is kaiming_uniform with a = sqrt(5), i.e. U(+-1/sqrt(fan_in)),
// and the bias U(+-1/sqrt(fan_in)). He et al. (2015) derive the ReLU gain: it keeps the variance
// of activations constant from layer to layer.
#pragma once
#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace mt::layers {

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
// For a weight of shape [out, in] or [out, in, kh, kw, ...]; Error for fewer than 2 dims.
Fans compute_fans(const core::Shape& weight_shape);

// In-place fills; they run under NoGradGuard, so parameters can be (re)initialized after
// registration.
void uniform_(const core::Tensor& t, double low, double high, core::Generator& gen);
void normal_(const core::Tensor& t, double mean, double stddev, core::Generator& gen);
void constant_(const core::Tensor& t, double value);
void kaiming_normal_(const core::Tensor& weight, core::Generator& gen);  // over fan_out, ReLU gain

// PyTorch's default for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) for the weight and
// U(+-1/sqrt(fan_in)) for the bias (which may be undefined).
void default_init_(const core::Tensor& weight, const core::Tensor& bias, core::Generator& gen);

}  // namespace mt::layers
