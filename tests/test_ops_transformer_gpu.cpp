// CPU-vs-GPU comparisons of the transformer ops (core/ops/transformer.h). Each op runs forward
// and backward on fresh random inputs on both devices; outputs and input gradients must agree
// within float32 tolerances (atol 1e-4, rtol 1e-3 unless a test says why), and the embedding
// gradient, which both devices sum in the same order, exactly. Every test starts with
// MT_REQUIRE_GPU(), so without a GPU (or in a CPU-only build) they all skip visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/transformer.h"
#include "core/synchronize.h"
#include "core/random.h"
#include "support/gradcheck.h"

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::random_tensor;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor random_ids(const Shape& shape, int64_t below, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> v(shape_numel(shape));
  for (auto& x : v) x = static_cast<int64_t>(gen.below(static_cast<uint64_t>(below)));
  return Tensor::from_vector(v, shape);
}

// Runs f on copies of `inputs` on each device (float32 inputs require grad unless listed in
// `constant`), backpropagates a fixed random gradient, and compares the output and every
// input gradient.
void expect_match(const OpFn& f, const std::vector<Tensor>& inputs, double atol = 1e-4, double rtol = 1e-3,
                  const std::vector<size_t>& constant = {}) {
  auto run = [&](Device dev) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      Tensor c = t.defined() ? t.detach().clone().to(dev) : t;
      const bool is_constant = std::find(constant.begin(), constant.end(), i) != constant.end();
      if (c.defined() && c.dtype() == DType::Float32 && !is_constant) c.set_requires_grad(true);
      in.push_back(c);
    }
    Tensor out = f(in);
    std::vector<Tensor> res = {out.detach().to(Device::cpu())};
    out.backward(random_tensor(out.shape(), 99).to(dev));
    for (const Tensor& t : in)
      if (t.defined() && t.requires_grad()) res.push_back(t.grad().to(Device::cpu()));
    return res;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(Device::cuda());
  ASSERT_EQ(cpu.size(), gpu.size());
  EXPECT_TRUE(all_close(gpu[0], cpu[0], atol, rtol)) << "forward output";
  for (size_t i = 1; i < cpu.size(); ++i)
    EXPECT_TRUE(all_close(gpu[i], cpu[i], atol, rtol)) << "gradient of differentiable input " << i - 1;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(GpuTransformerOps, Embedding) {
  MT_REQUIRE_GPU();
  // Many repeats per row (a 50-row table, 3000 lookups): the gradient sums agree bit for bit.
  const Tensor ids = random_ids({30, 100}, 50, 1);
  expect_match([ids](auto& in) { return embedding(in[0], ids.to(in[0].device())); }, {random_tensor({50, 96}, 2)},
               0.0, 0.0);
  // A BERT-sized table with few lookups: most rows of the gradient are zero.
  const Tensor few = random_ids({4, 16}, 30522, 3);
  expect_match([few](auto& in) { return embedding(in[0], few.to(in[0].device())); }, {random_tensor({30522, 8}, 4)},
               0.0, 0.0);
}

TEST(GpuTransformerOps, EmbeddingBadIndexNamesIt) {
  MT_REQUIRE_GPU();
  const Tensor table = random_tensor({5, 3}, 5);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 4, 7, 9}, {4});
  const std::string cpu = error_of([&] { embedding(table, ids); });
  // On the GPU the error comes at the next read (core/cuda/index_checks.h).
  const std::string gpu = error_of([&] { (void)embedding(table.to(Device::cuda()), ids.to(Device::cuda())).to_vector(); });
  EXPECT_NE(cpu.find("index 7 at position 2"), std::string::npos) << cpu;
  EXPECT_EQ(gpu, cpu);
}

TEST(GpuTransformerOps, LayerNorm) {
  MT_REQUIRE_GPU();
  auto f = [](auto& in) { return layer_norm(in[0], in[1], in[2], 1e-5f); };
  expect_match(f, {random_tensor({3, 7, 33}, 6), random_tensor({33}, 7, 0.5f, 1.5f), random_tensor({33}, 8)});
  // BERT's width with more rows than one chunk of the parameter-gradient sums; the parameter
  // gradients sum 200 rows, hence the looser absolute tolerance.
  expect_match(f, {random_tensor({200, 768}, 9, -2.0f, 2.0f), random_tensor({768}, 10), random_tensor({768}, 11)},
               5e-4, 1e-3);
  // Input frozen: only the parameter gradients.
  expect_match(f, {random_tensor({40, 16}, 12), random_tensor({16}, 13), random_tensor({16}, 14)}, 1e-4, 1e-3, {0});
}

TEST(GpuTransformerOps, Gelu) {
  MT_REQUIRE_GPU();
  expect_match([](auto& in) { return gelu(in[0]); }, {random_tensor({37, 129}, 15, -5.0f, 5.0f)});
}

TEST(GpuTransformerOps, MaskedSoftmax) {
  MT_REQUIRE_GPU();
  // Batch 2's keys are all masked (zeros, zero gradient); rows longer than a warp.
  std::vector<float> mask(3 * 40, 1.0f);
  for (int64_t j = 30; j < 40; ++j) mask[j] = 0.0f;
  for (int64_t j = 80; j < 120; ++j) mask[j] = 0.0f;
  const Tensor m = Tensor::from_vector(mask, {3, 40});
  expect_match([m](auto& in) { return masked_softmax(in[0], m.to(in[0].device()), 0.125f); },
               {random_tensor({3, 4, 5, 40}, 16, -8.0f, 8.0f)});
  expect_match([](auto& in) { return masked_softmax(in[0], Tensor(), 1.0f); }, {random_tensor({2, 2, 3, 7}, 17)});
}

TEST(GpuTransformerOps, Attention) {
  MT_REQUIRE_GPU();
  std::vector<float> mask(2 * 24, 1.0f);
  for (int64_t j = 18; j < 24; ++j) mask[24 + j] = 0.0f;  // padding at the end of sequence 2
  const Tensor m = Tensor::from_vector(mask, {2, 24});
  const std::vector<Tensor> qkv = {random_tensor({2, 3, 24, 16}, 18), random_tensor({2, 3, 24, 16}, 19),
                                   random_tensor({2, 3, 24, 16}, 20)};
  for (float p : {0.0f, 0.1f}) {
    // Dropout draws by counter from the same seed on both devices, so the masks agree.
    expect_match(
        [m, p](auto& in) {
          Generator gen(21);
          return attention(in[0], in[1], in[2], m.to(in[0].device()), p, /*training=*/true, gen);
        },
        qkv);
  }
  // Heads split from [B, S, H, Dh] by a transposed view, as a BERT layer does.
  expect_match(
      [](auto& in) {
        Generator gen(22);
        return attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2), Tensor(), 0.0f, false, gen);
      },
      {random_tensor({2, 10, 4, 8}, 23), random_tensor({2, 10, 4, 8}, 24), random_tensor({2, 10, 4, 8}, 25)});
}

TEST(GpuTransformerOps, CrossEntropyIgnore) {
  MT_REQUIRE_GPU();
  // A third of the rows counted, as in an MLM batch where most positions are ignored.
  std::vector<int64_t> tv(64);
  for (int64_t i = 0; i < 64; ++i) tv[i] = i % 3 == 0 ? (i * 37) % 1000 : -100;
  const Tensor targets = Tensor::from_vector(tv, {64});
  expect_match([targets](auto& in) { return cross_entropy_ignore(in[0], targets.to(in[0].device())); },
               {random_tensor({64, 1000}, 27, -5.0f, 5.0f)});
  const Tensor none = Tensor::full({5}, -100, DType::Int64);
  expect_match([none](auto& in) { return cross_entropy_ignore(in[0], none.to(in[0].device())); },
               {random_tensor({5, 9}, 28)});
}

TEST(GpuTransformerOps, CrossEntropyIgnoreBadTargetNamesIt) {
  MT_REQUIRE_GPU();
  const Tensor logits = random_tensor({4, 6}, 29);
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{1, -100, 6, -3}, {4});
  const std::string cpu = error_of([&] { cross_entropy_ignore(logits, t); });
  // On the GPU the error comes at the next read (core/cuda/index_checks.h).
  const std::string gpu =
      error_of([&] { (void)cross_entropy_ignore(logits.to(Device::cuda()), t.to(Device::cuda())).item(); });
  EXPECT_NE(cpu.find("target 6 at position 2"), std::string::npos) << cpu;
  EXPECT_EQ(gpu, cpu);
}

// Token ids and targets out of range: the forward pass only queues the check (no copy back in
// every step); the next read of a value throws an Error naming the op, the value, its position
// and the valid range, the first failing op of those queued first; the device stays usable.
TEST(GpuTransformerOps, BadIndicesAreClearErrorsAtTheNextRead) {
  MT_REQUIRE_GPU();
  const Tensor table = random_tensor({4, 3}, 7).to(Device::cuda());
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 3, 4, 1, 7}, {5}).to(Device::cuda());
  const Tensor logits = random_tensor({3, 5}, 8).to(Device::cuda());
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{-100, 6, 2}, {3}).to(Device::cuda());
  Tensor rows, loss;
  EXPECT_NO_THROW(rows = embedding(table, ids)) << "the index check was read in the forward pass";
  EXPECT_NO_THROW(loss = cross_entropy_ignore(logits, targets)) << "the target check was read in the forward pass";
  try {
    (void)loss.item();
    ADD_FAILURE() << "an index out of range was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();  // the embedding ran first: its error, not the loss's
    EXPECT_NE(msg.find("embedding: index 4 at position 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("valid indices are 0..3"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW((void)rows.to(Device::cpu())) << "a failure is reported once";
  (void)cross_entropy_ignore(logits, targets);
  try {
    synchronize(Device::cuda());
    ADD_FAILURE() << "a target out of range was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cross_entropy_ignore: target 6 at position 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("valid targets are 0..4, or -100"), std::string::npos) << msg;
  }
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{-100, 1, 2}, {3}).to(Device::cuda());
  EXPECT_TRUE(std::isfinite(cross_entropy_ignore(logits, good).item()));
}
