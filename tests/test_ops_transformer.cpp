// Transformer ops (core/ops/transformer.h): finite-difference gradient checks, forward values
// against double-precision references written out loop by loop, the edge cases the contracts
// promise (fully masked rows, all-ignored targets, repeated indices), and clear errors for bad
// inputs. CPU-vs-GPU agreement is in test_ops_transformer_gpu.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "core/ops/transformer.h"
#include "core/random.h"
#include "support/gradcheck.h"

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::random_tensor;

namespace {

Tensor int64s(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// Expects f to throw an Error whose message contains `part`.
void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
}

// Reference masked softmax in double over the last dimension of [B, H, Sq, Sk].
std::vector<double> ref_masked_softmax(const std::vector<float>& s, const Shape& shape, const std::vector<float>& mask,
                                       double scale) {
  const int64_t b = shape[0], h = shape[1], q = shape[2], k = shape[3];
  std::vector<double> out(s.size(), 0.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t r = 0; r < h * q; ++r) {
      const int64_t base = (bi * h * q + r) * k;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < k; ++j)
        if (mask.empty() || mask[bi * k + j] != 0.0f) mx = std::max(mx, scale * s[base + j]);
      if (std::isinf(mx)) continue;
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j)
        if (mask.empty() || mask[bi * k + j] != 0.0f) sum += std::exp(scale * s[base + j] - mx);
      for (int64_t j = 0; j < k; ++j)
        if (mask.empty() || mask[bi * k + j] != 0.0f) out[base + j] = std::exp(scale * s[base + j] - mx) / sum;
    }
  return out;
}

Tensor to_tensor(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

}  // namespace

// ---------------------------------------------------------------- embedding

TEST(TransformerEmbedding, GathersRowsIntoIndexShape) {
  Tensor table = random_tensor({5, 3}, 1);
  Tensor idx = int64s({4, 0, 4, 2, 1, 4}, {2, 3});
  Tensor out = embedding(table, idx);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3}));
  std::vector<float> t = table.to_vector(), o = out.to_vector();
  const std::vector<int64_t> ids = {4, 0, 4, 2, 1, 4};
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(o[i * 3 + c], t[ids[i] * 3 + c]) << "lookup " << i;
  // A 0-d index picks one row, shaped [D].
  EXPECT_EQ(embedding(table, Tensor::full({}, 3, DType::Int64)).shape(), (Shape{3}));
}

TEST(TransformerEmbedding, GradientSumsRepeatedRowsAndZerosTheRest) {
  const std::vector<int64_t> ids = {4, 0, 4, 2, 4};
  Tensor table = random_tensor({6, 3}, 2);
  table.set_requires_grad(true);
  Tensor out = embedding(table, int64s(ids, {5}));
  Tensor gy = random_tensor({5, 3}, 3);
  out.backward(gy);
  std::vector<double> expected(18, 0.0);
  std::vector<float> g = gy.to_vector();
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < 3; ++c) expected[ids[i] * 3 + c] += g[i * 3 + c];
  EXPECT_TRUE(all_close(table.grad(), to_tensor(expected, {6, 3}), 1e-6, 1e-6));
  std::vector<float> got = table.grad().to_vector();
  for (int64_t r : {1, 3, 5})
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(got[r * 3 + c], 0.0f) << "row " << r << " was never picked";
}

TEST(TransformerEmbedding, Gradcheck) {
  Tensor idx = int64s({1, 3, 1, 0, 3, 3}, {3, 2});
  EXPECT_TRUE(gradcheck([idx](auto& in) { return embedding(in[0], idx); }, {random_tensor({4, 5}, 4)}));
  // A non-contiguous table (a transposed view) gathers the same rows.
  EXPECT_TRUE(gradcheck([idx](auto& in) { return embedding(in[0].transpose(0, 1), idx); }, {random_tensor({5, 4}, 5)}));
}

TEST(TransformerEmbedding, BadInputs) {
  Tensor table = random_tensor({5, 3}, 6);
  expect_error([&] { embedding(table, int64s({0, 5, 1}, {3})); }, "index 5 at position 1");
  expect_error([&] { embedding(table, int64s({-1}, {1})); }, "index -1");
  expect_error([&] { embedding(table, Tensor::zeros({2})); }, "int64 indices");
  expect_error([&] { embedding(random_tensor({5}, 7), int64s({0}, {1})); }, "table [rows, dim]");
}

// ---------------------------------------------------------------- layer_norm

TEST(TransformerLayerNorm, MatchesDoubleReference) {
  // Rows with a large mean against their spread: a one-pass variance would lose most digits.
  const int64_t n = 6, d = 37;
  Tensor x = add(random_tensor({2, 3, d}, 8, -1.0f, 1.0f), 300.0f);
  Tensor w = random_tensor({d}, 9, 0.5f, 1.5f), b = random_tensor({d}, 10);
  const float eps = 1e-5f;
  Tensor y = layer_norm(x, w, b, eps);
  ASSERT_EQ(y.shape(), x.shape());
  std::vector<float> vx = x.to_vector(), vw = w.to_vector(), vb = b.to_vector();
  std::vector<double> ref(vx.size());
  for (int64_t i = 0; i < n; ++i) {
    double mu = 0.0, var = 0.0;
    for (int64_t j = 0; j < d; ++j) mu += vx[i * d + j];
    mu /= d;
    for (int64_t j = 0; j < d; ++j) var += (vx[i * d + j] - mu) * (vx[i * d + j] - mu);
    var /= d;
    for (int64_t j = 0; j < d; ++j) ref[i * d + j] = (vx[i * d + j] - mu) / std::sqrt(var + eps) * vw[j] + vb[j];
  }
  EXPECT_TRUE(all_close(y, to_tensor(ref, x.shape()), 1e-4, 1e-4));
}

TEST(TransformerLayerNorm, Gradcheck) {
  auto f = [](auto& in) { return layer_norm(in[0], in[1], in[2], 1e-5f); };
  EXPECT_TRUE(gradcheck(f, {random_tensor({4, 6}, 11), random_tensor({6}, 12, 0.5f, 1.5f), random_tensor({6}, 13)}));
  EXPECT_TRUE(gradcheck(f, {random_tensor({2, 3, 5}, 14), random_tensor({5}, 15, -1.5f, 1.5f), random_tensor({5}, 16)}));
  // Non-contiguous input.
  EXPECT_TRUE(gradcheck([](auto& in) { return layer_norm(in[0].transpose(0, 1), in[1], in[2], 1e-5f); },
                        {random_tensor({5, 3}, 17), random_tensor({5}, 18), random_tensor({5}, 19)}));
}

TEST(TransformerLayerNorm, OnlyTheRequestedGradients) {
  // A frozen input (no requires_grad) still yields the parameter gradients, and they equal
  // the column sums of gy * xhat and gy.
  Tensor x = random_tensor({3, 4}, 20), w = random_tensor({4}, 21), b = random_tensor({4}, 22);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor gy = random_tensor({3, 4}, 23);
  layer_norm(x, w, b, 1e-5f).backward(gy);
  Tensor xhat = layer_norm(x, Tensor::ones({4}), Tensor::zeros({4}), 1e-5f);
  EXPECT_TRUE(all_close(w.grad(), sum(mul(gy, xhat), {0}), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(b.grad(), sum(gy, {0}), 1e-6, 1e-6));
  EXPECT_FALSE(x.grad().defined());
}

TEST(TransformerLayerNorm, BadInputs) {
  Tensor x = random_tensor({2, 4}, 24);
  expect_error([&] { layer_norm(x, Tensor::ones({3}), Tensor::zeros({4})); }, "weight must be float32 [4]");
  expect_error([&] { layer_norm(x, Tensor::ones({4}), Tensor()); }, "bias must be float32 [4]");
  expect_error([&] { layer_norm(x, Tensor::ones({4}), Tensor::zeros({4}), 0.0f); }, "eps must be positive");
}

// ---------------------------------------------------------------- gelu

TEST(TransformerGelu, ValuesAndGradcheck) {
  Tensor x = Tensor::from_vector(std::vector<float>{-3, -1, -0.5f, 0, 0.5f, 1, 3}, {7});
  std::vector<double> ref;
  for (float v : x.to_vector()) ref.push_back(v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))));
  EXPECT_TRUE(all_close(gelu(x), to_tensor(ref, {7}), 1e-6, 1e-5));
  EXPECT_NEAR(gelu(Tensor::full({1}, 1.0)).item(), 0.8413447, 1e-6);  // Phi(1)
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0]); }, {random_tensor({3, 4, 5}, 25, -3.0f, 3.0f)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0].transpose(0, 1)); }, {random_tensor({4, 3}, 26, -3.0f, 3.0f)}));
}

// ---------------------------------------------------------------- masked_softmax

TEST(TransformerMaskedSoftmax, MatchesReferenceWithAndWithoutMask) {
  const Shape shape = {2, 3, 4, 5};
  Tensor s = random_tensor(shape, 27, -3.0f, 3.0f);
  const std::vector<float> mask = {1, 1, 0, 1, 0, /* batch 1 */ 1, 0, 0, 0, 1};
  const float scale = 0.7f;
  Tensor y = masked_softmax(s, Tensor::from_vector(mask, {2, 5}), scale);
  EXPECT_TRUE(all_close(y, to_tensor(ref_masked_softmax(s.to_vector(), shape, mask, scale), shape), 1e-6, 1e-5));
  Tensor y_nomask = masked_softmax(s, Tensor(), scale);
  EXPECT_TRUE(all_close(y_nomask, to_tensor(ref_masked_softmax(s.to_vector(), shape, {}, scale), shape), 1e-6, 1e-5));
  // Without a mask it is softmax of the scaled scores.
  EXPECT_TRUE(all_close(y_nomask, softmax(mul(s, scale), -1), 1e-6, 1e-5));
}

TEST(TransformerMaskedSoftmax, FullyMaskedRowsAreZeroWithZeroGradient) {
  Tensor s = random_tensor({2, 2, 3, 4}, 28);
  s.set_requires_grad(true);
  Tensor mask = Tensor::from_vector(std::vector<float>{0, 0, 0, 0, /* batch 1 */ 1, 0, 1, 1}, {2, 4});
  Tensor y = masked_softmax(s, mask, 0.5f);
  y.backward(random_tensor(y.shape(), 29));
  std::vector<float> vy = y.to_vector(), vg = s.grad().to_vector();
  for (int64_t i = 0; i < 24; ++i) {  // batch 0: every key masked
    EXPECT_EQ(vy[i], 0.0f) << i;
    EXPECT_EQ(vg[i], 0.0f) << i;
  }
  for (int64_t i = 24; i < 48; ++i) {
    EXPECT_FALSE(std::isnan(vy[i]));
    if (i % 4 == 1) {  // masked key of batch 1
      EXPECT_EQ(vy[i], 0.0f) << i;
      EXPECT_EQ(vg[i], 0.0f) << i;
    }
  }
}

TEST(TransformerMaskedSoftmax, Gradcheck) {
  // The mask is captured, not an input: it selects and gets no gradient.
  Tensor mask = Tensor::from_vector(std::vector<float>{1, 0, 1, 1, /* batch 1 */ 0, 1, 1, 0}, {2, 4});
  EXPECT_TRUE(gradcheck([mask](auto& in) { return masked_softmax(in[0], mask, 0.6f); },
                        {random_tensor({2, 2, 3, 4}, 30, -2.0f, 2.0f)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return masked_softmax(in[0], Tensor(), 1.3f); },
                        {random_tensor({1, 2, 2, 5}, 31, -2.0f, 2.0f)}));
}

TEST(TransformerMaskedSoftmax, BadInputs) {
  Tensor s = random_tensor({2, 1, 3, 4}, 32);
  expect_error([&] { masked_softmax(random_tensor({2, 3, 4}, 33), Tensor(), 1.0f); }, "[batch, heads, queries, keys]");
  expect_error([&] { masked_softmax(s, Tensor::ones({2, 3}), 1.0f); }, "key_mask must be float32 [batch, keys] = [2, 4]");
  expect_error([&] { masked_softmax(s, Tensor::ones({2, 4}, DType::Int64), 1.0f); }, "key_mask");
}

// ---------------------------------------------------------------- attention

TEST(TransformerAttention, MatchesDoubleReference) {
  const int64_t B = 2, H = 3, S = 4, D = 5;
  Tensor q = random_tensor({B, H, S, D}, 34), k = random_tensor({B, H, S, D}, 35), v = random_tensor({B, H, S, D}, 36);
  const std::vector<float> mask = {1, 1, 1, 0, /* batch 1 */ 1, 0, 1, 1};
  Generator gen(1);
  Tensor out = attention(q, k, v, Tensor::from_vector(mask, {B, S}), 0.1f, /*training=*/false, gen);
  ASSERT_EQ(out.shape(), (Shape{B, H, S, D}));
  std::vector<float> vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  std::vector<float> scores(B * H * S * S);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0.0;
        for (int64_t c = 0; c < D; ++c) acc += double(vq[(bh * S + i) * D + c]) * vk[(bh * S + j) * D + c];
        scores[(bh * S + i) * S + j] = static_cast<float>(acc);
      }
  std::vector<double> p = ref_masked_softmax(scores, {B, H, S, S}, mask, 1.0 / std::sqrt(double(D)));
  std::vector<double> ref(B * H * S * D, 0.0);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t c = 0; c < D; ++c)
        for (int64_t j = 0; j < S; ++j) ref[(bh * S + i) * D + c] += p[(bh * S + i) * S + j] * vv[(bh * S + j) * D + c];
  EXPECT_TRUE(all_close(out, to_tensor(ref, {B, H, S, D}), 1e-5, 1e-4));
  EXPECT_EQ(gen.offset(), 0u) << "evaluation must not draw dropout randomness";
}

TEST(TransformerAttention, Gradcheck) {
  Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 0, /* batch 1 */ 1, 1, 1}, {2, 3});
  auto f = [mask](auto& in) {
    Generator gen(3);
    return attention(in[0], in[1], in[2], mask, 0.0f, /*training=*/true, gen);
  };
  EXPECT_TRUE(gradcheck(f, {random_tensor({2, 2, 3, 4}, 37), random_tensor({2, 2, 3, 4}, 38), random_tensor({2, 2, 3, 4}, 39)}));
  // The usual layout: heads split from [B, S, H, Dh] and transposed (non-contiguous views).
  auto g = [](auto& in) {
    Generator gen(3);
    return attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2), Tensor(), 0.0f, false, gen);
  };
  EXPECT_TRUE(gradcheck(g, {random_tensor({2, 3, 2, 4}, 40), random_tensor({2, 3, 2, 4}, 41), random_tensor({2, 3, 2, 4}, 42)}));
}

TEST(TransformerAttention, DropoutActsOnTheProbabilities) {
  Tensor q = random_tensor({2, 2, 6, 4}, 43), k = random_tensor({2, 2, 6, 4}, 44), v = random_tensor({2, 2, 6, 4}, 45);
  Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 6});
  Generator g1(7), g2(7), g3(7);
  Tensor a = attention(q, k, v, mask, 0.4f, /*training=*/true, g1);
  // The same composition spelled out, drawing dropout from an identically seeded generator.
  Tensor p = masked_softmax(matmul(q.reshape({4, 6, 4}), k.reshape({4, 6, 4}).transpose(1, 2)).view({2, 2, 6, 6}),
                            mask, 0.5f);
  Tensor ref = matmul(dropout(p, 0.4f, true, g2).view({4, 6, 6}), v.reshape({4, 6, 4})).view({2, 2, 6, 4});
  EXPECT_TRUE(all_close(a, ref, 1e-6, 1e-5));
  EXPECT_GT(g1.offset(), 0u);
  EXPECT_FALSE(all_close(a, attention(q, k, v, mask, 0.0f, true, g3), 1e-3, 1e-3)) << "dropout changed nothing";
}

TEST(TransformerAttention, BadInputs) {
  Generator gen(0);
  Tensor q = random_tensor({2, 2, 3, 4}, 46);
  expect_error([&] { attention(q, random_tensor({2, 2, 3, 5}, 47), q, Tensor(), 0.0f, false, gen); }, "does not match q");
  expect_error([&] { attention(q, q, random_tensor({2, 2, 4, 4}, 48), Tensor(), 0.0f, false, gen); }, "does not match k");
  expect_error([&] { attention(random_tensor({4, 3, 4}, 49), q, q, Tensor(), 0.0f, false, gen); }, "[batch, heads, seq, head_dim]");
  expect_error([&] { attention(q, q, q, Tensor::ones({2, 4}), 0.0f, false, gen); }, "key_mask");
}

// ---------------------------------------------------------------- cross_entropy_ignore

TEST(TransformerCrossEntropyIgnore, MatchesReference) {
  const int64_t n = 6, k = 7;
  Tensor logits = random_tensor({n, k}, 50, -4.0f, 4.0f);
  const std::vector<int64_t> t = {3, -100, 0, 6, -100, 3};
  Tensor loss = cross_entropy_ignore(logits, int64s(t, {n}));
  std::vector<float> x = logits.to_vector();
  double total = 0.0;
  int counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == -100) continue;
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(double(x[i * k + j]));
    total += std::log(sum) - x[i * k + t[i]];
    ++counted;
  }
  EXPECT_NEAR(loss.item(), total / counted, 1e-5);
  // The same as cross_entropy over the kept rows alone.
  Tensor kept = cat({logits.narrow(0, 0, 1), logits.narrow(0, 2, 2), logits.narrow(0, 5, 1)}, 0);
  EXPECT_NEAR(loss.item(), cross_entropy(kept, int64s({3, 0, 6, 3}, {4})).item(), 1e-6);
}

TEST(TransformerCrossEntropyIgnore, Gradcheck) {
  Tensor t = int64s({2, -100, 0, 4, 1}, {5});
  EXPECT_TRUE(gradcheck([t](auto& in) { return cross_entropy_ignore(in[0], t); }, {random_tensor({5, 5}, 51, -2.0f, 2.0f)}));
  // Another ignore_index, and one inside the class range: targets equal to it are skipped.
  Tensor t0 = int64s({0, 3, 0, 2}, {4});
  EXPECT_TRUE(gradcheck([t0](auto& in) { return cross_entropy_ignore(in[0], t0, 0); }, {random_tensor({4, 4}, 52)}));
}

TEST(TransformerCrossEntropyIgnore, IgnoredRowsGetZeroGradient) {
  Tensor logits = random_tensor({3, 4}, 53);
  logits.set_requires_grad(true);
  cross_entropy_ignore(logits, int64s({-1, 2, -1}, {3}), -1).backward();
  std::vector<float> g = logits.grad().to_vector();
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(g[j], 0.0f);
    EXPECT_EQ(g[8 + j], 0.0f);
  }
  double row_sum = 0.0;
  for (int64_t j = 4; j < 8; ++j) row_sum += g[j];
  EXPECT_NEAR(row_sum, 0.0, 1e-6);  // softmax - onehot sums to 0
  EXPECT_LT(g[6], 0.0f);            // the target's entry pulls up
}

TEST(TransformerCrossEntropyIgnore, AllIgnoredIsZeroLossAndGradient) {
  Tensor logits = random_tensor({3, 4}, 54);
  logits.set_requires_grad(true);
  Tensor loss = cross_entropy_ignore(logits, int64s({-100, -100, -100}, {3}));
  EXPECT_EQ(loss.item(), 0.0f);
  loss.backward();
  for (float g : logits.grad().to_vector()) EXPECT_EQ(g, 0.0f);
}

TEST(TransformerCrossEntropyIgnore, BadInputs) {
  Tensor logits = random_tensor({3, 4}, 55);
  expect_error([&] { cross_entropy_ignore(logits, int64s({1, 4, -100}, {3})); }, "target 4 at position 1");
  expect_error([&] { cross_entropy_ignore(logits, int64s({1, -1, -100}, {3})); }, "target -1 at position 1");
  expect_error([&] { cross_entropy_ignore(logits, int64s({1, 2}, {2})); }, "2 targets for 3 rows");
  expect_error([&] { cross_entropy_ignore(logits, Tensor::zeros({3})); }, "int64 targets");
  expect_error([&] { cross_entropy_ignore(random_tensor({3}, 56), int64s({1, 2, 3}, {3})); }, "logits [N, classes]");
}

// ---------------------------------------------------------------- wide rows: the vectorized loops
// The CPU kernels above call exp and erf from vectorized loops (glibc's vector versions,
// core/kernels/cpu/vector_math.h). The small shapes above fit in one vector's tail; these are
// wide enough for the vector bodies, with tails, extreme values and masks, against double.

namespace {

double gelu_ref(double v) { return v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))); }

double gelu_grad_ref(double v) {
  return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
}

}  // namespace

TEST(TransformerWideRows, GeluMatchesDoubleReference) {
  const int64_t n = 3 * 1024 + 37;  // blocks of 1024 and a tail
  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = -12.0f + 24.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  xs[5] = 0.0f;
  xs[6] = -0.0f;
  xs[7] = 1e-20f;
  xs[8] = 30.0f;
  xs[9] = -30.0f;
  Tensor x = Tensor::from_vector(xs, {n});
  x.set_requires_grad(true);
  Tensor y = gelu(x);
  Tensor gy = random_tensor({n}, 60);
  y.backward(gy);
  const std::vector<float> vy = y.to_vector(), vg = x.grad().to_vector(), vgy = gy.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const double want = gelu_ref(xs[i]), want_g = gelu_grad_ref(xs[i]) * vgy[i];
    ASSERT_NEAR(vy[i], want, 2e-6 * std::max(1.0, std::abs(want))) << "x = " << xs[i];
    ASSERT_NEAR(vg[i], want_g, 2e-6 * std::max(1.0, std::abs(want_g))) << "x = " << xs[i];
  }
}

TEST(TransformerWideRows, GeluHasTheSameBitsForAnyThreadCount) {
  // Each value falls in the same vectorized block, body or tail, whatever the thread split
  // (enough values for the loop to run in parallel).
  const int64_t n = 40 * 1024 + 11;
  Tensor x = random_tensor({n}, 61, -4.0f, 4.0f);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    outs.push_back(gelu(x).to_vector());
  }
  omp_set_num_threads(before);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(TransformerWideRows, MaskedSoftmaxMatchesDoubleReference) {
  const Shape shape = {2, 2, 3, 131};  // rows of 131 keys: 8 vectors of 16 and a tail
  Tensor s = random_tensor(shape, 62, -8.0f, 8.0f);
  std::vector<float> mask(2 * 131, 1.0f);
  for (int64_t j = 0; j < 131; ++j) mask[j] = (j % 3 == 1 || j > 120) ? 0.0f : 1.0f;
  const float scale = 0.9f;
  Tensor y = masked_softmax(s, Tensor::from_vector(mask, {2, 131}), scale);
  EXPECT_TRUE(all_close(y, to_tensor(ref_masked_softmax(s.to_vector(), shape, mask, scale), shape), 1e-7, 1e-5));
  const std::vector<float> vy = y.to_vector();
  for (int64_t r = 0; r < 2 * 3; ++r) {  // batch 0's masked keys are exactly zero
    for (int64_t j = 0; j < 131; ++j) {
      if (mask[j] == 0.0f) {
        ASSERT_EQ(vy[r * 131 + j], 0.0f) << r << " " << j;
      }
    }
  }
  Tensor y_nomask = masked_softmax(s, Tensor(), scale);
  EXPECT_TRUE(all_close(y_nomask, to_tensor(ref_masked_softmax(s.to_vector(), shape, {}, scale), shape), 1e-7, 1e-5));
}

TEST(TransformerWideRows, CrossEntropiesMatchDoubleReference) {
  const int64_t n = 4, k = 1037;  // a vocabulary-like row: vectors and a tail
  std::vector<float> x = random_tensor({n, k}, 63, -20.0f, 20.0f).to_vector();
  for (int64_t j = 0; j < k; ++j) x[2 * k + j] += 80.0f;  // exp(100) overflows float: the max must come first
  const std::vector<int64_t> t = {5, 1036, 0, 700};
  // Loss and gradient in double: mean over rows of lse - x[target]; softmax - onehot, over n.
  double total = 0.0;
  std::vector<double> grad(n * k);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, double(x[i * k + j]));
    for (int64_t j = 0; j < k; ++j) sum += std::exp(x[i * k + j] - mx);
    const double lse = mx + std::log(sum);
    total += lse - x[i * k + t[i]];
    for (int64_t j = 0; j < k; ++j) grad[i * k + j] = (std::exp(x[i * k + j] - lse) - (j == t[i])) / n;
  }
  for (bool ignore_form : {false, true}) {
    Tensor logits = Tensor::from_vector(x, {n, k});
    logits.set_requires_grad(true);
    Tensor loss = ignore_form ? cross_entropy_ignore(logits, int64s(t, {n})) : cross_entropy(logits, int64s(t, {n}));
    EXPECT_NEAR(loss.item(), total / n, 1e-5 * total / n) << "ignore form " << ignore_form;
    loss.backward();
    EXPECT_TRUE(all_close(logits.grad(), to_tensor(grad, {n, k}), 1e-8, 1e-5)) << "ignore form " << ignore_form;
  }
}
