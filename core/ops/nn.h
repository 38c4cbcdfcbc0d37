// Neural-network ops: activations, convolution, pooling, normalization, dropout, softmax and
// losses, concatenation. Each is differentiable; kernels live in core/kernels/cpu/ (and
// core/kernels/cuda/ once the CUDA backend adds them). Tensors are NCHW.
#pragma once
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace mt::core {

Tensor relu(const Tensor& x);
// relu(a + b) in one pass when a and b have the same shape and memory format (a residual
// block's end); otherwise the two ops.
Tensor add_relu(const Tensor& a, const Tensor& b);

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
};
// x: [N, C, H, W], weight: [O, C, kh, kw], bias: [O] or undefined -> [N, O, Ho, Wo].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions opt = {});

// Pooling windows of kernel x kernel; padding counts as -inf (max) or is excluded (avg).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Tensor global_avg_pool2d(const Tensor& x);  // [N, C, H, W] -> [N, C]

// Batch norm over N, H, W per channel of x [N, C, H, W] (or over N of [N, C]). In training it
// normalizes with the batch statistics and updates the running ones in place:
// running = (1 - momentum) * running + momentum * batch (unbiased variance, as PyTorch).
// In evaluation it uses the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);
// relu(batch_norm(...)) in batch norm's own passes over memory, each way: the same values and
// gradients, without a ReLU pass in between or a second activation kept for backward.
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);

// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// Identity when not training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Mean negative log-likelihood of int64 targets [N] given log-probabilities [N, K].
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets);
// log_softmax + nll_loss fused (one pass forward, softmax - onehot backward).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);

Tensor cat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace mt::core
