// Layers and models: parameter names and counts, output shapes, state dicts (round trip and
// strict errors), train/eval behaviour, gradient checks, initialization and determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/serialize.h"
#include "layers/basic_block.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/max_pool2d.h"
#include "layers/avg_pool2d.h"
#include "layers/global_avg_pool2d.h"
#include "layers/models/registry.h"
#include "layers/relu.h"
#include "layers/sequential.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"
#include "support/test_helpers.h"

using namespace mt::core;
using namespace mt::layers;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::random_tensor;

namespace {

std::shared_ptr<Module> model(const std::string& name, int64_t in_channels, int64_t image_size, uint64_t seed = 1,
                              int64_t num_classes = 10) {
  ModelOptions o;
  o.in_channels = in_channels;
  o.image_size = image_size;
  o.num_classes = num_classes;
  Generator gen(seed);
  return build_model(name, o, gen);
}

std::vector<std::string> names_of(const NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Tensor forward_no_grad(Module& m, const Tensor& x) {
  NoGradGuard ng;
  return m.forward(x);
}

}  // namespace

// ------------------------------------------------------------------------ names and counts

TEST(Models, LeNet5NamesAndCount) {
  auto m = model("lenet5", 1, 28);
  EXPECT_EQ(m->num_parameters(), 61706);
  EXPECT_EQ(names_of(m->named_parameters()),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                      "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  EXPECT_TRUE(m->named_buffers().empty());
  // 32x32 RGB: fc1 sees 16 x 6 x 6 features.
  EXPECT_EQ(model("lenet5", 3, 32)->num_parameters(), 456 + 2416 + (576 * 120 + 120) + 10164 + 850);
}

TEST(Models, ResNetCounts) {
  // Option-B (projection) shortcuts: the paper's option-A counts (269,722 / 464,154 / 853,018)
  // plus 2 x (1x1 conv + BN) = 512 + 64 + 2048 + 128 = 2,752.
  EXPECT_EQ(model("resnet20", 3, 32)->num_parameters(), 272474);
  EXPECT_EQ(model("resnet32", 3, 32)->num_parameters(), 466906);
  EXPECT_EQ(model("resnet56", 3, 32)->num_parameters(), 855770);
  EXPECT_EQ(model("resnet20", 1, 28)->num_parameters(), 272474 - 2 * 16 * 9);
}

TEST(Models, ResNetNamesFollowTorchvision) {
  auto m = model("resnet20", 3, 32);
  auto names = names_of(m->named_parameters());
  // conv1 + bn1 (3), 9 blocks x (2 convs + 2 BNs) (54), 2 projections x (conv + BN) (6), fc (2).
  ASSERT_EQ(names.size(), 65u);
  EXPECT_EQ(names[0], "conv1.weight");
  EXPECT_EQ(names[1], "bn1.weight");
  EXPECT_EQ(names[2], "bn1.bias");
  EXPECT_EQ(names[3], "layer1.0.conv1.weight");
  EXPECT_EQ(names.back(), "fc.bias");
  EXPECT_NE(std::find(names.begin(), names.end(), "layer2.0.downsample.0.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layer3.0.downsample.1.bias"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "layer1.0.downsample.0.weight"), names.end());
  auto buffers = names_of(m->named_buffers());
  EXPECT_EQ(buffers[0], "bn1.running_mean");
  EXPECT_EQ(buffers[1], "bn1.running_var");
  EXPECT_EQ(buffers[2], "bn1.num_batches_tracked");
  EXPECT_EQ(buffers.size(), 3u * (1 + 9 * 2 + 2));  // 21 batch norms
  // state_dict: parameters, then buffers.
  auto sd = m->state_dict();
  EXPECT_EQ(sd.size(), names.size() + buffers.size());
  EXPECT_EQ(sd[names.size()].first, "bn1.running_mean");
}

TEST(Models, MlpNamesAndCount) {
  auto m = model("mlp", 1, 28);
  EXPECT_EQ(m->num_parameters(), (784 * 256 + 256) + (256 * 128 + 128) + (128 * 10 + 10));
  EXPECT_EQ(names_of(m->named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  ModelOptions o;
  o.hidden = {};
  Generator gen(0);
  EXPECT_EQ(build_model("mlp", o, gen)->num_parameters(), 7850);  // logistic regression
}

TEST(Models, OutputShapes) {
  struct Case {
    std::string name;
    int64_t c, s;
  };
  for (const Case& k : {Case{"mlp", 1, 28}, Case{"lenet5", 1, 28}, Case{"lenet5", 3, 32}, Case{"resnet20", 3, 32},
                        Case{"resnet32", 3, 16}, Case{"resnet56", 3, 16}, Case{"resnet20", 1, 28}}) {
    // (The deeper ResNets on 16x16 images: same code path, a quarter of the work.)
    auto m = model(k.name, k.c, k.s, 1, 7);
    Tensor x = random_tensor({2, k.c, k.s, k.s}, 3);
    Tensor y = m->forward(x);
    EXPECT_EQ(y.shape(), (Shape{2, 7})) << k.name << " " << k.c << "x" << k.s;
    m->eval();
    EXPECT_EQ(forward_no_grad(*m, x).shape(), (Shape{2, 7})) << k.name;
  }
}

TEST(Models, UnknownNameListsValidOnes) {
  std::string msg = error_of([] { model("resnet19", 3, 32); });
  EXPECT_TRUE(contains(msg, "resnet19")) << msg;
  for (const auto& n : model_names()) EXPECT_TRUE(contains(msg, n)) << msg;
  EXPECT_EQ(model_names(), (std::vector<std::string>{"mlp", "lenet5", "resnet20", "resnet32", "resnet56",
                                                     "resnet18", "resnet50", "bert_tiny", "bert_mini",
                                                     "bert_small", "bert_base"}));
}

TEST(Models, BadOptionsAreErrors) {
  EXPECT_TRUE(contains(error_of([] { model("lenet5", 1, 8); }), "image_size"));
  EXPECT_TRUE(contains(error_of([] { model("mlp", 1, 28, 1, 0); }), "num_classes"));
  ModelOptions o;
  o.dropout = 1.0f;
  Generator gen(0);
  EXPECT_TRUE(contains(error_of([&] { build_model("mlp", o, gen); }), "dropout"));
  auto m = model("lenet5", 1, 28);
  EXPECT_TRUE(contains(error_of([&] { m->forward(Tensor::zeros({1, 3, 32, 32})); }), "in_channels"));
}

TEST(Models, SameSeedSameWeights) {
  for (const auto& name : model_names()) {
    if (name.rfind("bert", 0) == 0) continue;  // needs a vocabulary; tests/test_bert.cpp checks seeding
    auto a = model(name, 3, 32, 42), b = model(name, 3, 32, 42), c = model(name, 3, 32, 43);
    auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
    ASSERT_EQ(pa.size(), pb.size());
    bool all_same_as_c = true;
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].to_vector(), pb[i].to_vector()) << name << " param " << i;
      if (pa[i].to_vector() != pc[i].to_vector()) all_same_as_c = false;
    }
    EXPECT_FALSE(all_same_as_c) << name << ": another seed gave the same weights";
  }
}

// ------------------------------------------------------------------------ state dicts

TEST(StateDict, RoundTripThroughArchiveGivesIdenticalOutputs) {
  auto a = model("resnet20", 3, 32, 1);
  Tensor x = random_tensor({4, 3, 32, 32}, 5);
  a->forward(x);  // a training step's forward moves the BN running statistics
  a->eval();
  const Tensor ya = forward_no_grad(*a, x);

  // The temp folder, not the build tree: the GPU check runs this binary where no build tree exists.
  const std::string path = mt::testing::make_temp_dir("mt_test_layers_state") + "/state.mtar";
  Archive ar;
  ar.add("model.", a->state_dict());
  save_archive(path, ar);
  Archive loaded = load_archive(path);
  std::remove(path.c_str());

  auto b = model("resnet20", 3, 32, 2);
  b->eval();
  EXPECT_FALSE(all_close(forward_no_grad(*b, x), ya));
  b->load_state_dict(loaded.with_prefix("model."));
  EXPECT_TRUE(all_close(forward_no_grad(*b, x), ya, 0, 0));
  auto bufs = b->named_buffers();
  EXPECT_EQ(bufs[2].first, "bn1.num_batches_tracked");
  EXPECT_EQ(bufs[2].second.item(), 1.0f);
}

TEST(StateDict, StrictLoadNamesMissingAndUnexpected) {
  auto m = model("lenet5", 1, 28, 1);
  auto fresh = model("lenet5", 1, 28, 2);
  StateDict sd = m->state_dict();
  StateDict missing(sd.begin() + 1, sd.end());  // drops conv1.weight
  std::string msg = error_of([&] { fresh->load_state_dict(missing); });
  EXPECT_TRUE(contains(msg, "missing")) << msg;
  EXPECT_TRUE(contains(msg, "conv1.weight")) << msg;

  StateDict extra = sd;
  extra.emplace_back("fc4.weight", Tensor::zeros({3}));
  msg = error_of([&] { fresh->load_state_dict(extra); });
  EXPECT_TRUE(contains(msg, "unexpected")) << msg;
  EXPECT_TRUE(contains(msg, "fc4.weight")) << msg;

  // A failed load changes nothing.
  EXPECT_NE(fresh->parameters()[1].to_vector(), m->parameters()[1].to_vector());

  // Non-strict: loads what matches, ignores the rest.
  fresh->load_state_dict(missing, /*strict=*/false);
  EXPECT_EQ(fresh->parameters()[1].to_vector(), m->parameters()[1].to_vector());
  EXPECT_NE(fresh->parameters()[0].to_vector(), m->parameters()[0].to_vector());
  fresh->load_state_dict(extra, /*strict=*/false);
  EXPECT_EQ(fresh->parameters()[0].to_vector(), m->parameters()[0].to_vector());
}

TEST(StateDict, ShapeMismatchIsAnErrorEvenWhenNotStrict) {
  auto ten = model("lenet5", 1, 28, 1, 10);
  auto five = model("lenet5", 1, 28, 1, 5);
  for (bool strict : {true, false}) {
    std::string msg = error_of([&] { five->load_state_dict(ten->state_dict(), strict); });
    EXPECT_TRUE(contains(msg, "fc3.weight")) << msg;
    EXPECT_TRUE(contains(msg, "[10, 84]")) << msg;
    EXPECT_TRUE(contains(msg, "[5, 84]")) << msg;
  }
}

TEST(StateDict, ConvertsAnInt64BatchCounter) {
  BatchNorm2d bn(2);
  StateDict sd = bn.state_dict();
  for (auto& [n, t] : sd)
    if (n == "num_batches_tracked") t = Tensor::from_vector(std::vector<int64_t>{7}, {});
  bn.load_state_dict(sd);
  EXPECT_EQ(bn.num_batches_tracked(), 7);
}

// ------------------------------------------------------------------------ train / eval

TEST(TrainEval, BatchNormUsesBatchStatsInTrainingAndRunningStatsInEval) {
  BatchNorm2d bn(2);
  Generator gen(3);
  // Channel 0 around 5, channel 1 around -2.
  Tensor x = rand_uniform({4, 2, 3, 3}, -1, 1, gen) +
             Tensor::from_vector(std::vector<float>{5, -2}, {1, 2, 1, 1});
  Tensor y = bn.forward(x);
  Tensor channel_mean = mean(y, {0, 2, 3});
  EXPECT_TRUE(all_close(channel_mean, Tensor::zeros({2}), 1e-5, 0));
  EXPECT_EQ(bn.num_batches_tracked(), 1);
  Tensor batch_mean = mean(x, {0, 2, 3});
  EXPECT_TRUE(all_close(bn.running_mean(), batch_mean * 0.1f, 1e-5, 1e-5));

  bn.eval();
  EXPECT_FALSE(bn.is_training());
  const std::vector<float> rm = bn.running_mean().to_vector(), rv = bn.running_var().to_vector();
  Tensor ye = forward_no_grad(bn, x);
  std::vector<float> xv = x.contiguous().to_vector(), yv = ye.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 9) % 2;
    EXPECT_NEAR(yv[i], (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5f), 1e-4) << i;
  }
  EXPECT_EQ(bn.running_mean().to_vector(), rm);  // evaluation leaves the statistics alone
  EXPECT_EQ(bn.num_batches_tracked(), 1);
}

// forward_relu is relu(forward(x)) in one op, and keeps the layer's bookkeeping (running
// statistics, the batch counter) as forward does.
TEST(TrainEval, BatchNormForwardReluEqualsReluOfForward) {
  Generator gen(4);
  Tensor x = rand_uniform({4, 3, 3, 3}, -2, 2, gen);
  for (bool training : {true, false}) {
    BatchNorm2d fused(3), plain(3);
    fused.train(training);
    plain.train(training);
    Tensor a = fused.forward_relu(x), b = relu(plain.forward(x));
    EXPECT_EQ(a.to_vector(), b.to_vector());
    EXPECT_EQ(fused.running_mean().to_vector(), plain.running_mean().to_vector());
    EXPECT_EQ(fused.running_var().to_vector(), plain.running_var().to_vector());
    EXPECT_EQ(fused.num_batches_tracked(), plain.num_batches_tracked());
  }
}

TEST(TrainEval, DropoutOnlyInTraining) {
  Dropout d(0.5f, 9);
  Tensor x = Tensor::ones({1000});
  std::vector<float> y = d.forward(x).to_vector();
  int zeros = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || std::fabs(v - 2.0f) < 1e-6) << v;
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  d.eval();
  EXPECT_EQ(d.forward(x).to_vector(), x.to_vector());
}

TEST(TrainEval, SwitchIsRecursive) {
  ModelOptions o;
  o.dropout = 0.5f;
  Generator gen(4);
  auto mlp = build_model("mlp", o, gen);
  Tensor x = random_tensor({3, 1, 28, 28}, 1);
  Tensor t1 = forward_no_grad(*mlp, x), t2 = forward_no_grad(*mlp, x);
  EXPECT_FALSE(all_close(t1, t2));  // fresh dropout masks each call
  mlp->eval();
  for (auto& [n, child] : mlp->named_children()) EXPECT_FALSE(child->is_training()) << n;
  EXPECT_TRUE(all_close(forward_no_grad(*mlp, x), forward_no_grad(*mlp, x), 0, 0));
  mlp->train();
  for (auto& [n, child] : mlp->named_children()) EXPECT_TRUE(child->is_training()) << n;

  auto resnet = model("resnet20", 3, 32);
  Tensor xr = random_tensor({2, 3, 32, 32}, 2);
  resnet->eval();
  Tensor e1 = forward_no_grad(*resnet, xr);
  // In eval mode one example's output does not depend on the rest of the batch.
  Tensor e_first = forward_no_grad(*resnet, xr.narrow(0, 0, 1));
  EXPECT_TRUE(all_close(e_first, e1.narrow(0, 0, 1), 1e-4, 1e-4));
  resnet->train();
  Tensor t_first = forward_no_grad(*resnet, Tensor::zeros({2, 3, 32, 32}) + xr.narrow(0, 0, 1));
  EXPECT_FALSE(all_close(t_first.narrow(0, 0, 1), e1.narrow(0, 0, 1), 1e-4, 1e-4));
}

// ------------------------------------------------------------------------ gradients

TEST(Gradcheck, LinearWrtInput) {
  Generator gen(1);
  Linear fc(5, 3, gen);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return fc.forward(in[0]); },
                        {random_tensor({4, 5}, 2)}));
}

TEST(Gradcheck, Conv2dWrtInput) {
  Generator gen(1);
  Conv2d conv(Conv2dLayerOptions{2, 3, 3, 2, 1, true}, gen);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return conv.forward(in[0]); },
                        {random_tensor({2, 2, 5, 5}, 2)}));
}

TEST(Gradcheck, ResidualBlockWrtInput) {
  Generator gen(1);
  for (int64_t stride : {1, 2}) {
    // stride 2 with a channel change: the projection shortcut; stride 1: the identity.
    BasicBlock block(2, stride == 1 ? 2 : 3, stride, gen);
    EXPECT_EQ(block.has_projection(), stride == 2);
    for (bool training : {false, true}) {
      block.train(training);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return block.forward(in[0]); },
                            {random_tensor({2, 2, 4, 4}, 7)}))
          << "stride " << stride << (training ? " train" : " eval");
    }
  }
}

TEST(Gradcheck, ParametersReceiveGradients) {
  auto m = model("resnet20", 3, 8);
  Tensor loss = sum(square(m->forward(random_tensor({2, 3, 8, 8}, 1))));
  loss.backward();
  for (const auto& [n, p] : m->named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
}

// ------------------------------------------------------------------------ initialization

TEST(Init, DefaultLinearAndConvBounds) {
  Generator gen(5);
  Linear fc(100, 50, gen);
  const float bound = 1.0f / std::sqrt(100.0f);
  for (float v : fc.weight().to_vector()) EXPECT_LE(std::fabs(v), bound);
  for (float v : fc.bias().to_vector()) EXPECT_LE(std::fabs(v), bound);
  // Uniform on [-b, b] has variance b^2 / 3.
  double var = 0;
  for (float v : fc.weight().to_vector()) var += double(v) * v;
  var /= 5000;
  EXPECT_NEAR(var, bound * bound / 3, 0.1 * bound * bound / 3);

  Conv2d conv(Conv2dLayerOptions{4, 8, 3, 1, 1, true}, gen);
  const float cb = 1.0f / std::sqrt(36.0f);
  for (float v : conv.weight().to_vector()) EXPECT_LE(std::fabs(v), cb);
  BatchNorm2d bn(3);
  EXPECT_EQ(bn.weight().to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.bias().to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(Init, ResNetConvsAreKaimingNormalFanOut) {
  auto m = model("resnet56", 3, 32);
  for (const auto& [name, p] : m->named_parameters()) {
    if (name != "layer3.5.conv2.weight") continue;
    // fan_out = 64 * 3 * 3: std = sqrt(2 / 576).
    double var = 0;
    for (float v : p.to_vector()) var += double(v) * v;
    var /= static_cast<double>(p.numel());
    EXPECT_NEAR(std::sqrt(var), std::sqrt(2.0 / 576), 0.03 * std::sqrt(2.0 / 576));
    return;
  }
  FAIL() << "layer3.5.conv2.weight not found";
}

TEST(Init, FansNeedTwoDims) {
  EXPECT_EQ(compute_fans({8, 4, 3, 3}).fan_in, 36);
  EXPECT_EQ(compute_fans({8, 4, 3, 3}).fan_out, 72);
  EXPECT_THROW(compute_fans({8}), Error);
}

// ------------------------------------------------------------------------ Module mechanics

namespace {
struct Tied : Module {
  Tensor w;
  Tied() {
    w = register_parameter("a", Tensor::ones({2}));
    register_parameter("b", w);  // the same tensor under a second name (weight tying)
    register_buffer("count", Tensor::zeros({}));
  }
  Tensor forward(const Tensor& x) override { return x * w; }
  std::string type_name() const override { return "Tied"; }
  void add_param(const std::string& name) { register_parameter(name, Tensor::zeros({1})); }
};
}  // namespace

TEST(Module, TiedParametersAppearOnceInParametersButByEveryNameInStateDict) {
  Tied t;
  EXPECT_EQ(t.parameters().size(), 1u);
  EXPECT_EQ(t.num_parameters(), 2);
  EXPECT_EQ(t.state_dict().size(), 3u);
  EXPECT_TRUE(t.parameters()[0].requires_grad());
}

TEST(Module, NamesMustBeUniqueAndDotless) {
  Tied t;
  EXPECT_TRUE(contains(error_of([&] { t.add_param("a"); }), "already registered"));
  EXPECT_TRUE(contains(error_of([&] { t.add_param("count"); }), "already registered"));
  EXPECT_TRUE(contains(error_of([&] { t.add_param("x.y"); }), "'.'"));
  EXPECT_TRUE(contains(error_of([&] { t.add_param(""); }), "non-empty"));
}

TEST(Module, SequentialRunsInOrderAndNamesByPosition) {
  Generator gen(1);
  Sequential seq;
  seq.push_back(std::make_shared<Flatten>());
  auto fc1 = seq.push_back(std::make_shared<Linear>(12, 5, gen));
  seq.push_back(std::make_shared<ReLU>());
  seq.push_back(std::make_shared<Linear>(5, 2, gen));
  EXPECT_EQ(seq.size(), 4u);
  EXPECT_EQ(names_of(seq.named_parameters()),
            (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"}));
  EXPECT_TRUE(fc1->weight().same(seq.parameters()[0]));
  Tensor x = random_tensor({2, 3, 2, 2}, 1);
  Tensor y = seq.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  auto* l3 = dynamic_cast<Linear*>(seq[3].get());
  ASSERT_NE(l3, nullptr);
  EXPECT_THROW(seq[4], Error);
}

TEST(Module, PoolingLayers) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  EXPECT_EQ(MaxPool2d(2).forward(x).to_vector(), (std::vector<float>{6, 8, 14, 16}));
  EXPECT_EQ(AvgPool2d(2).forward(x).to_vector(), (std::vector<float>{3.5f, 5.5f, 11.5f, 13.5f}));
  EXPECT_EQ(GlobalAvgPool2d().forward(x).to_vector(), (std::vector<float>{8.5f}));
  EXPECT_EQ(ReLU().forward(Tensor::from_vector(std::vector<float>{-1, 2}, {2})).to_vector(),
            (std::vector<float>{0, 2}));
  EXPECT_THROW(MaxPool2d(0), Error);
}

TEST(Module, SummaryAndToCpu) {
  auto m = model("lenet5", 1, 28);
  std::string s = m->summary();
  EXPECT_TRUE(contains(s, "61706")) << s;
  EXPECT_TRUE(contains(s, "fc1.weight")) << s;
  EXPECT_TRUE(contains(s, "[120, 400]")) << s;
  Tensor w = m->parameters()[0];
  m->to(Device::cpu());  // no-op, identity kept
  EXPECT_TRUE(w.same(m->parameters()[0]));
  if (!cuda_available()) {
    EXPECT_THROW(m->to(Device::cuda(0)), Error);
  }
}

// ------------------------------------------------------------------------ end to end

TEST(Models, LeNet5AndResNetFitATinyBatch) {
  // Layers + loss + optimizer together: a few SGD steps on one fixed batch must drive the loss
  // down (memorization), which fails if any gradient is wrong or missing.
  for (const std::string name : {"lenet5", "resnet20"}) {
    const int64_t size = name == "lenet5" ? 16 : 8;  // as small as each model allows: keep it quick
    auto m = model(name, 1, size, 3, 4);
    Tensor x = random_tensor({8, 1, size, size}, 11);
    Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8});
    mt::optim::SgdOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    mt::optim::SGD sgd(m->parameters(), o);
    float first = 0, last = 0;
    for (int it = 0; it < 40; ++it) {
      sgd.zero_grad();
      Tensor loss = cross_entropy(m->forward(x), y);
      loss.backward();
      sgd.step();
      (it == 0 ? first : last) = loss.item();
    }
    EXPECT_LT(last, 0.25f * first) << name << ": loss " << first << " -> " << last;
  }
}
