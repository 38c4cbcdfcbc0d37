// The CPU convolution implementations against each other: the fast one (oneDNN, where built)
// against the im2col + GEMM reference on random shapes (odd sizes, padding, stride, batch 1,
// rectangular kernels, with and without bias), forward and both backward passes, on 1 and 2
// threads; and a whole ResNet-20 training step on the fast path against the same step with its
// convolutions on the reference kernels (called directly, support/reference_conv.h). Builds
// without oneDNN have one implementation and skip these, visibly.
// (The reference itself is checked against a naive convolution and by gradient checks in
// test_ops_nn.cpp, which run on the default, fast path.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/kernels/cpu/conv.h"
#include "core/memory_format.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/models/registry.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"
#include "support/reference_conv.h"

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::random_tensor;

namespace {

struct Shape4 {
  int64_t n, c, h, w, o, kh, kw, stride, pad;
  bool bias;
  std::string str() const {
    return "x[" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(h) + "," + std::to_string(w) +
           "] w[" + std::to_string(o) + "," + std::to_string(c) + "," + std::to_string(kh) + "," +
           std::to_string(kw) + "] stride " + std::to_string(stride) + " pad " + std::to_string(pad) +
           (bias ? " bias" : "");
  }
};

// Restores the thread count when a test ends.
struct ThreadsGuard {
  int threads = num_threads();
  ~ThreadsGuard() { set_num_threads(threads); }
};

// Forward, and backward with every combination of wanted gradients, on the dispatching kernels
// against the reference, with x (and dx) and y (and dy) in the formats given.
void expect_same(const Shape4& s, uint64_t seed, bool x_cl = false, bool y_cl = false, double tol = 2e-4) {
  SCOPED_TRACE(s.str() + (x_cl ? " x channels-last" : "") + (y_cl ? " y channels-last" : ""));
  const Tensor x = random_tensor({s.n, s.c, s.h, s.w}, seed);
  const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, seed + 1);
  const Tensor b = s.bias ? random_tensor({s.o}, seed + 2) : Tensor();
  const int64_t ho = (s.h + 2 * s.pad - s.kh) / s.stride + 1, wo = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
  // Sums over up to C*kh*kw (forward, dW: N*Ho*Wo) products in another order: float32 rounding
  // (the default tol).

  Tensor y_fast = empty_in_format({s.n, s.o, ho, wo}, y_cl, Device::cpu());
  Tensor y_ref = Tensor::empty({s.n, s.o, ho, wo}, DType::Float32);
  cpu::conv2d_forward(in_format(x, x_cl), w, b, s.stride, s.pad, y_fast);
  cpu::conv2d_forward_reference(x, w, b, s.stride, s.pad, y_ref);
  EXPECT_TRUE(all_close(y_fast, y_ref, tol, tol)) << "forward";

  const Tensor gy = random_tensor({s.n, s.o, ho, wo}, seed + 3);
  for (int want = 1; want < 8; ++want) {
    const bool want_x = want & 1, want_w = want & 2, want_b = (want & 4) && s.bias;
    if (!want_x && !want_w && !want_b) continue;
    auto outs = [&](bool cl) {
      return std::vector<Tensor>{want_x ? empty_in_format(x.shape(), cl, Device::cpu()) : Tensor(),
                                 want_w ? Tensor::empty(w.shape(), DType::Float32) : Tensor(),
                                 want_b ? Tensor::empty({s.o}, DType::Float32) : Tensor()};
    };
    std::vector<Tensor> fast = outs(x_cl), ref = outs(false);
    cpu::conv2d_backward(in_format(x, x_cl), w, in_format(gy, y_cl), s.stride, s.pad, fast[0], fast[1],
                         fast[2]);
    cpu::conv2d_backward_reference(x, w, gy, s.stride, s.pad, ref[0], ref[1], ref[2]);
    const char* names[] = {"dx", "dw", "db"};
    for (int i = 0; i < 3; ++i) {
      if (!fast[i].defined()) continue;
      EXPECT_TRUE(all_close(fast[i], ref[i], tol, tol)) << names[i] << ", wanted " << want;
    }
  }
}

// ||a - b|| / ||b||.
double relative_distance(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (double(va[i]) - vb[i]) * (double(va[i]) - vb[i]);
    den += double(vb[i]) * vb[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// ResNet-20's forward (layers/models/resnet.cpp, layers/basic_block.cpp) on the model's own
// modules, with every convolution on the reference kernels.
using mt::layers::Module;
std::shared_ptr<Module> child(const Module& m, const std::string& name) {
  for (const auto& [n, c] : m.named_children())
    if (n == name) return c;
  return nullptr;
}
Tensor conv_ref(const std::shared_ptr<Module>& m, const Tensor& x) {
  const auto& c = dynamic_cast<const mt::layers::Conv2d&>(*m);
  return mt::testing::reference_conv2d(x, c.weight(), c.bias(), c.options().stride, c.options().padding);
}
Tensor bn_relu(const std::shared_ptr<Module>& m, const Tensor& x) {
  return dynamic_cast<mt::layers::BatchNorm2d&>(*m).forward_relu(x);
}
Tensor resnet_on_reference(const Module& model, const Tensor& x) {
  Tensor h = bn_relu(child(model, "bn1"), conv_ref(child(model, "conv1"), x));
  for (const char* stage : {"layer1", "layer2", "layer3"})
    for (const auto& [name, block] : child(model, stage)->named_children()) {
      Tensor out = bn_relu(child(*block, "bn1"), conv_ref(child(*block, "conv1"), h));
      out = child(*block, "bn2")->forward(conv_ref(child(*block, "conv2"), out));
      Tensor shortcut = h;
      if (auto ds = child(*block, "downsample")) shortcut = child(*ds, "1")->forward(conv_ref(child(*ds, "0"), h));
      h = add_relu(out, shortcut);
    }
  return child(model, "fc")->forward(global_avg_pool2d(h));
}

}  // namespace

TEST(ConvCpu, FastMatchesReferenceOnRandomShapes) {
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: the reference is the only implementation";
  ThreadsGuard guard;
  Generator gen(26);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(gen.next_u32() % (hi - lo + 1)); };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int i = 0; i < 30; ++i) {
      Shape4 s;
      s.n = i % 5 == 0 ? 1 : pick(1, 6);
      s.c = pick(1, 20);
      s.o = pick(1, 20);
      s.kh = pick(1, 5);
      s.kw = i % 3 == 0 ? pick(1, 5) : s.kh;
      s.stride = pick(1, 3);
      s.pad = pick(0, 2);
      s.h = pick(std::max<int64_t>(1, s.kh - 2 * s.pad), 17);
      s.w = pick(std::max<int64_t>(1, s.kw - 2 * s.pad), 17);
      s.bias = pick(0, 1) == 1;
      expect_same(s, 100 + i);
      expect_same(s, 100 + i, true, true);    // channels-last activations
      expect_same(s, 100 + i, false, true);   // an NCHW batch of images into channels-last
    }
  }
}

TEST(ConvCpu, FastMatchesReferenceOnResNetShapes) {
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: the reference is the only implementation";
  ThreadsGuard guard;
  set_num_threads(2);
  // 3x3 and 1x1, stride 1 and 2, CIFAR and ImageNet stages (spatially reduced: the kernels'
  // blocking depends on the channels, not on the image size), the 7x7 stem.
  const std::vector<Shape4> shapes = {
      {8, 3, 32, 32, 16, 3, 3, 1, 1, false},    {8, 16, 32, 32, 16, 3, 3, 1, 1, false},
      {8, 16, 32, 32, 32, 3, 3, 2, 1, false},   {8, 16, 32, 32, 32, 1, 1, 2, 0, false},
      {4, 64, 8, 8, 64, 3, 3, 1, 1, false},     {2, 3, 30, 30, 64, 7, 7, 2, 3, false},
      {2, 64, 14, 14, 256, 1, 1, 1, 0, false},  {2, 256, 14, 14, 64, 1, 1, 1, 0, false},
      {2, 256, 14, 14, 512, 1, 1, 2, 0, false}, {2, 128, 13, 13, 128, 3, 3, 2, 1, false},
      {1, 512, 7, 7, 2048, 1, 1, 1, 0, false},  {1, 2048, 7, 7, 512, 1, 1, 1, 0, true},
      {4, 3, 32, 32, 16, 3, 3, 1, 1, false},    {4, 16, 32, 32, 16, 3, 3, 1, 1, false},
      {4, 16, 32, 32, 32, 3, 3, 2, 1, false},   {4, 32, 16, 16, 32, 3, 3, 1, 1, false},
      {4, 32, 16, 16, 64, 3, 3, 2, 1, false},   {4, 64, 8, 8, 64, 3, 3, 1, 1, false},
      {4, 16, 32, 32, 32, 1, 1, 2, 0, false},   {4, 32, 16, 16, 64, 1, 1, 2, 0, false}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    expect_same(shapes[i], 200 + i);
    expect_same(shapes[i], 200 + i, true, true);
  }
}

// Wide 3x3 stride-1 layers (ResNet-50's) run oneDNN's Winograd kernels where the CPU has them
// (AVX-512), narrow ones the direct kernels. Winograd agrees with the reference
// to about 1e-5 relative (its transforms add and subtract a tile's values before the products,
// measured 7e-5 on outputs of size 5); the tolerance leaves room for other seeds.
TEST(ConvCpu, WinogradOnWideThreeByThreeLayers) {
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: the reference is the only implementation";
  ThreadsGuard guard;
  set_num_threads(2);
  const Shape4 wide = {4, 64, 24, 24, 64, 3, 3, 1, 1, false}, narrow = {4, 16, 24, 24, 16, 3, 3, 1, 1, false};
  const Shape4 few_tiles = {2, 64, 8, 8, 64, 3, 3, 1, 1, false};  // 8 output tiles of 4x4
  auto kernels = [](const Shape4& s) {
    const Tensor x = to_channels_last(random_tensor({s.n, s.c, s.h, s.w}, 1));
    return cpu::conv2d_kernel_names(x, random_tensor({s.o, s.c, s.kh, s.kw}, 2), s.stride, s.pad);
  };
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");  // avx512_core
  std::printf("wide: %s\nnarrow: %s\n", kernels(wide).c_str(), kernels(narrow).c_str());
  if (avx512) {
    EXPECT_NE(kernels(wide).find("wino"), std::string::npos) << kernels(wide);
  } else {
    std::printf("no AVX-512 on this CPU: oneDNN has no Winograd kernels here, the direct ones run\n");
  }
  EXPECT_EQ(kernels(narrow).find("wino"), std::string::npos) << kernels(narrow);
  EXPECT_EQ(kernels(few_tiles).find("wino"), std::string::npos) << kernels(few_tiles);
  expect_same(wide, 400, true, true, 5e-4);
  expect_same({4, 64, 24, 24, 64, 3, 3, 1, 1, true}, 404, true, true, 5e-4);  // with a bias
  expect_same(wide, 401, false, true, 5e-4);
  expect_same({8, 128, 14, 14, 128, 3, 3, 1, 1, false}, 402, true, true, 5e-4);
}

// One SGD step of ResNet-20 (batch norm, residual adds, projections, stride-2 stages) on the
// fast convolutions and on the reference: loss, every gradient and every parameter update.
TEST(ConvCpu, ResNet20StepMatchesReference) {
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: the reference is the only implementation";
  ThreadsGuard guard;
  set_num_threads(2);
  const Tensor x = random_tensor({4, 3, 32, 32}, 7);
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 7, 3, 0}, {4});

  struct Result {
    double loss;
    mt::layers::NamedTensors grads, updates;  // updates: parameter after the step - before
  };
  auto step = [&](bool reference) {
    mt::layers::ModelOptions o;
    o.in_channels = 3;
    o.image_size = 32;
    o.num_classes = 10;
    Generator gen(1);
    auto model = mt::layers::build_model("resnet20", o, gen);
    model->train();
    mt::optim::SgdOptions so;
    so.lr = 0.1;
    so.momentum = 0.9;
    so.weight_decay = 1e-4;
    mt::optim::SGD sgd(model->parameters(), so);
    Tensor loss = cross_entropy(reference ? resnet_on_reference(*model, x) : model->forward(x), labels);
    loss.backward();
    Result r{loss.item(), {}, {}};
    for (const auto& [name, p] : model->named_parameters()) {
      r.grads.push_back({name, p.grad().clone()});
      r.updates.push_back({name, p.clone()});
    }
    sgd.step();
    const auto params = model->named_parameters();
    for (size_t i = 0; i < params.size(); ++i) r.updates[i].second = sub(params[i].second, r.updates[i].second);
    return r;
  };
  const Result ref = step(true);
  {  // the fast path runs the activations channels-last end to end
    const Result fast = step(false);
    EXPECT_NEAR(fast.loss, ref.loss, 1e-5 * std::max(1.0, std::abs(ref.loss)));
    ASSERT_EQ(fast.grads.size(), ref.grads.size());
    // Element by element the gradients are not comparable: a pre-activation within rounding of
    // zero flips its ReLU, and the reference path itself moves as much (up to 2% in a batch-norm
    // bias's gradient, a sum that mostly cancels) when the input is scaled by 1 + 1e-6. So each
    // gradient is compared as a whole, by its relative distance; a wrong layout or a missing
    // term would be off by order 1.
    double worst = 0.0;
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      const double d = relative_distance(fast.grads[i].second, ref.grads[i].second);
      worst = std::max(worst, d);
      EXPECT_LT(d, 5e-2) << ref.grads[i].first;
      EXPECT_LT(relative_distance(fast.updates[i].second, ref.updates[i].second), 5e-2) << ref.updates[i].first;
    }
    std::printf("largest relative distance of a gradient: %.2e\n", worst);
  }
}

// The dispatching kernels take channels-last operands in every build: the reference kernels
// know NCHW only and go through NCHW copies (builds without oneDNN, a shape oneDNN refuses).
TEST(ConvCpu, TakesChannelsLastOperands) {
  const std::vector<Shape4> shapes = {{3, 5, 9, 7, 4, 3, 3, 1, 1, true}, {2, 16, 8, 8, 8, 3, 3, 2, 1, false},
                                      {1, 7, 5, 6, 3, 1, 1, 1, 0, true}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    expect_same(shapes[i], 300 + i, true, true);
    expect_same(shapes[i], 300 + i, false, true);
  }
}
