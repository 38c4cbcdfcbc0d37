// Gradient checks for elementwise arithmetic, reductions and matrix products.
#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "support/gradcheck.h"

using namespace mt::core;
using mt::testing::gradcheck;
using mt::testing::random_tensor;

TEST(OpsGrad, BinaryBroadcast) {
  Tensor a = random_tensor({2, 3, 4}, 1), b = random_tensor({3, 1}, 2);
  Tensor pos = random_tensor({3, 1}, 3, 0.5f, 2.0f);
  EXPECT_TRUE(gradcheck([](auto& in) { return add(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return sub(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return mul(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return div(in[0], in[1]); }, {a, pos}));
}

TEST(OpsGrad, Unary) {
  Tensor x = random_tensor({3, 5}, 4);
  Tensor pos = random_tensor({3, 5}, 5, 0.5f, 2.0f);
  EXPECT_TRUE(gradcheck([](auto& in) { return neg(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return exp(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return log(in[0]); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& in) { return sqrt(in[0]); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& in) { return square(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return tanh(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return sigmoid(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return pow(in[0], 3.0f); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& in) { return add(mul(in[0], 2.5f), 1.0f); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return abs(in[0]); }, {pos}));
}

TEST(OpsGrad, Reductions) {
  Tensor x = random_tensor({2, 3, 4}, 6);
  EXPECT_TRUE(gradcheck([](auto& in) { return sum(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return mean(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return sum(in[0], {0, 2}); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return mean(in[0], {1}, true); }, {x}));
}

TEST(Ops, ReductionValues) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(x, {0}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(x, {1}).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_FLOAT_EQ(mean(x).item(), 3.5f);
  Tensor am = argmax(Tensor::from_vector(std::vector<float>{1, 9, 3, 7, 2, 1}, {2, 3}), 1);
  EXPECT_EQ(am.data<int64_t>()[0], 1);
  EXPECT_EQ(am.data<int64_t>()[1], 0);
  EXPECT_THROW(sum(x, {2}), Error);
}

TEST(OpsGrad, Matmul) {
  EXPECT_TRUE(gradcheck([](auto& in) { return matmul(in[0], in[1]); },
                        {random_tensor({3, 4}, 7), random_tensor({4, 5}, 8)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return matmul(in[0].transpose(0, 1), in[1]); },
                        {random_tensor({4, 3}, 9), random_tensor({4, 2}, 10)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return matmul(in[0], in[1]); },
                        {random_tensor({2, 3, 4}, 11), random_tensor({2, 4, 2}, 12)}));
  EXPECT_THROW(matmul(random_tensor({3, 4}, 1), random_tensor({3, 4}, 2)), Error);
}

TEST(OpsGrad, Linear) {
  EXPECT_TRUE(gradcheck([](auto& in) { return linear(in[0], in[1], in[2]); },
                        {random_tensor({4, 6}, 13), random_tensor({3, 6}, 14), random_tensor({3}, 15)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return linear(in[0], in[1]); },
                        {random_tensor({4, 6}, 16), random_tensor({3, 6}, 17)}));
}

TEST(Ops, MatmulMatchesNaive) {
  Tensor a = random_tensor({37, 53}, 20), b = random_tensor({53, 29}, 21);
  Tensor c = matmul(a, b);
  std::vector<float> va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  for (int i = 0; i < 37; ++i)
    for (int j = 0; j < 29; ++j) {
      double acc = 0;
      for (int k = 0; k < 53; ++k) acc += double(va[i * 53 + k]) * vb[k * 29 + j];
      ASSERT_NEAR(vc[i * 29 + j], acc, 1e-4);
    }
}
