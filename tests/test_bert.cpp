// BERT: the transformer layers (embedding, layer norm, multi-head attention, encoder layer) and
// BertForMaskedLM — shapes, BERT-base's exact parameter count, the tied decoder weight (one
// parameter, gradient from both uses), the key-padding mask, gradient checks, overfitting a
// fixed batch, eval determinism, state dicts, the registry, and CPU-vs-GPU agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "core/ops/transformer.h"
#include "core/random.h"
#include "core/serialize.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/models/bert.h"
#include "layers/models/registry.h"
#include "layers/multi_head_attention.h"
#include "layers/transformer_layer.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"
#include "support/test_helpers.h"

using namespace mt::core;
using namespace mt::layers;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::random_tensor;

namespace {

// Small enough for finite differences; init_std well above BERT's 0.02 so attention
// weights are far from uniform and every path carries a visible gradient.
BertOptions micro_options(float dropout = 0.0f) {
  BertOptions o;
  o.vocab_size = 11;
  o.hidden = 8;
  o.layers = 2;
  o.heads = 2;
  o.intermediate = 12;
  o.max_position = 16;
  o.hidden_dropout = dropout;
  o.attention_dropout = dropout;
  o.init_std = 0.3f;
  o.layer_norm_eps = 1e-5f;
  return o;
}

Tensor ids_tensor(const std::vector<int64_t>& v, int64_t batch, int64_t seq) {
  return Tensor::from_vector(v, {batch, seq});
}

Tensor random_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(batch * seq));
  for (auto& x : v) x = static_cast<int64_t>(g.below(static_cast<uint64_t>(vocab)));
  return ids_tensor(v, batch, seq);
}

Tensor forward_no_grad(Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m.forward(x);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Central differences of a scalar loss with respect to some elements of a parameter, against
// the gradient backward() leaves in it. Also fails when backward left no gradient at all.
::testing::AssertionResult check_param_grad(Module& m, const Tensor& param, const std::function<Tensor()>& loss_fn,
                                            const std::vector<int64_t>& elements, double eps = 1e-2,
                                            double atol = 1e-3, double rtol = 3e-2) {
  for (auto& p : m.parameters()) p.zero_grad();
  loss_fn().backward();
  if (!param.grad().defined()) return ::testing::AssertionFailure() << "no gradient reached the parameter";
  const auto grad = param.grad().to_vector();
  float* data = param.data<float>();
  double largest = 0;
  for (int64_t e : elements) {
    const float original = data[e];
    double plus, minus;
    {
      NoGradGuard no_grad;
      data[e] = original + static_cast<float>(eps);
      plus = loss_fn().item();
      data[e] = original - static_cast<float>(eps);
      minus = loss_fn().item();
      data[e] = original;
    }
    const double numeric = (plus - minus) / (2 * eps);
    largest = std::max(largest, std::fabs(numeric));
    if (std::fabs(numeric - grad[e]) > atol + rtol * std::fabs(numeric))
      return ::testing::AssertionFailure() << "element " << e << ": backward " << grad[e] << ", finite difference "
                                           << numeric;
  }
  // Gradients that are all ~0 would pass trivially; the checks are chosen to be sensitive.
  if (largest < 1e-3) return ::testing::AssertionFailure() << "all checked gradients are ~0 (" << largest << ")";
  return ::testing::AssertionSuccess();
}

std::vector<int64_t> int_values(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

Tensor row(const Tensor& t, int64_t r) { return t.select(0, r).contiguous(); }

}  // namespace

// ------------------------------------------------------------------------ small layers

TEST(BertLayers, EmbeddingLooksUpRowsAndChecksDtype) {
  Generator gen(1);
  Embedding emb(7, 3, 0.02, gen);
  EXPECT_EQ(emb.weight().shape(), (Shape{7, 3}));
  const Tensor ids = ids_tensor({6, 0, 6, 2}, 2, 2);
  const Tensor out = emb.forward(ids);
  ASSERT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(row(out.reshape({4, 3}), 0).to_vector(), row(emb.weight(), 6).to_vector());
  EXPECT_EQ(row(out.reshape({4, 3}), 3).to_vector(), row(emb.weight(), 2).to_vector());
  EXPECT_TRUE(contains(error_of([&] { emb.forward(random_tensor({2, 2}, 1)); }), "int64"));
}

TEST(BertLayers, LayerNormStartsAsPureNormalization) {
  LayerNorm ln(5, 1e-5f);
  EXPECT_EQ(ln.weight().to_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(ln.bias().to_vector(), std::vector<float>(5, 0.0f));
  const Tensor y = forward_no_grad(ln, random_tensor({3, 5}, 2, -3.0f, 5.0f));
  for (int64_t r = 0; r < 3; ++r) {
    const auto v = row(y, r).to_vector();
    double mean = 0, sq = 0;
    for (float x : v) mean += x;
    mean /= 5;
    for (float x : v) sq += (x - mean) * (x - mean);
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(sq / 5, 1.0, 1e-3);
  }
  EXPECT_TRUE(contains(error_of([&] { ln.forward(random_tensor({3, 4}, 2)); }), "[..., 5]"));
}

TEST(BertLayers, AttentionNamesShapesAndHeadCheck) {
  Generator gen(3);
  MultiHeadAttention mha(12, 3, 0.0f, gen);
  std::vector<std::string> names;
  for (const auto& [n, t] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "dense.weight", "dense.bias"}));
  EXPECT_EQ(mha.qkv()->weight().shape(), (Shape{36, 12}));
  EXPECT_EQ(forward_no_grad(mha, random_tensor({2, 5, 12}, 4)).shape(), (Shape{2, 5, 12}));
  EXPECT_TRUE(contains(error_of([&] { MultiHeadAttention bad(10, 3, 0.0f, gen); }), "multiple of heads"));
}

// The hand-computed reference for one head layout: q/k/v are the row blocks of the fused
// weight, heads are contiguous column groups. Catches a wrong split (e.g. heads interleaved).
TEST(BertLayers, AttentionMatchesReferenceComputation) {
  Generator gen(5);
  const int64_t b = 2, s = 4, d = 6, h = 2, dh = 3;
  MultiHeadAttention mha(d, h, 0.0f, gen);
  const Tensor x = random_tensor({b, s, d}, 6);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 0, 1, 1, 1, 1}, {b, s});
  const Tensor y = [&] { NoGradGuard ng; return mha.forward(x, mask); }();

  const auto w = mha.qkv()->weight().to_vector(), bias = mha.qkv()->bias().to_vector();
  const auto wo = mha.dense()->weight().to_vector(), bo = mha.dense()->bias().to_vector();
  const auto xv = x.to_vector(), mv = mask.to_vector(), yv = y.to_vector();
  auto proj = [&](int64_t bi, int64_t si, int64_t out) {  // row out of the fused projection
    double acc = bias[out];
    for (int64_t i = 0; i < d; ++i) acc += w[out * d + i] * xv[(bi * s + si) * d + i];
    return acc;
  };
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t qi = 0; qi < s; ++qi) {
      std::vector<double> ctx(d, 0.0);
      for (int64_t hi = 0; hi < h; ++hi) {
        std::vector<double> score(s);
        double mx = -1e300;
        for (int64_t ki = 0; ki < s; ++ki) {
          double dot = 0;
          for (int64_t j = 0; j < dh; ++j) dot += proj(bi, qi, hi * dh + j) * proj(bi, ki, d + hi * dh + j);
          score[ki] = dot / std::sqrt(static_cast<double>(dh));
          if (mv[bi * s + ki] > 0) mx = std::max(mx, score[ki]);
        }
        double z = 0;
        for (int64_t ki = 0; ki < s; ++ki) z += mv[bi * s + ki] > 0 ? std::exp(score[ki] - mx) : 0.0;
        for (int64_t ki = 0; ki < s; ++ki) {
          const double p = mv[bi * s + ki] > 0 ? std::exp(score[ki] - mx) / z : 0.0;
          for (int64_t j = 0; j < dh; ++j) ctx[hi * dh + j] += p * proj(bi, ki, 2 * d + hi * dh + j);
        }
      }
      for (int64_t o = 0; o < d; ++o) {
        double expect = bo[o];
        for (int64_t i = 0; i < d; ++i) expect += wo[o * d + i] * ctx[i];
        EXPECT_NEAR(yv[(bi * s + qi) * d + o], expect, 1e-5) << "batch " << bi << " query " << qi << " out " << o;
      }
    }
  }
}

TEST(BertLayers, AttentionGradcheckThroughFusedSplit) {
  Generator gen(7);
  MultiHeadAttention mha(6, 2, 0.0f, gen);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 0, 1, 1, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], mask); },
                        {random_tensor({2, 3, 6}, 8)}));
  // The fused weight's gradient: each of the query, key and value blocks must land in its own
  // rows (a mixed-up split gives a wrong gradient here even where dx happened to agree).
  const Tensor x = random_tensor({2, 3, 6}, 9), r = random_tensor({2, 3, 6}, 10);
  const int64_t d = 6;
  std::vector<int64_t> elements;
  for (int64_t block = 0; block < 3; ++block)
    for (int64_t i : {0, 4, 13, 29}) elements.push_back(block * d * d + i);
  EXPECT_TRUE(check_param_grad(mha, mha.qkv()->weight(), [&] { return sum(mha.forward(x, mask) * r); }, elements));
}

TEST(BertLayers, TransformerLayerGradcheckAndNames) {
  Generator gen(10);
  TransformerLayerOptions o;
  o.hidden = 6;
  o.heads = 2;
  o.intermediate = 10;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  o.layer_norm_eps = 1e-5f;
  TransformerLayer layer(o, gen);
  std::vector<std::string> names;
  for (const auto& [n, t] : layer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"attention.qkv.weight", "attention.qkv.bias", "attention.dense.weight",
                                             "attention.dense.bias", "attention_norm.weight", "attention_norm.bias",
                                             "intermediate.weight", "intermediate.bias", "output.weight", "output.bias",
                                             "output_norm.weight", "output_norm.bias"}));
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 0}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return layer.forward(in[0], mask); },
                        {random_tensor({2, 3, 6}, 11)}));
}

// ------------------------------------------------------------------------ BERT models

TEST(Bert, BaseHasTheKnownMaskedLmParameterCount) {
  // BERT-base MLM with vocabulary V = 30522, hidden 768, 12 layers, FFN 3072, 512 positions,
  // 2 token types; the decoder weight is the word-embedding table, counted once:
  //   embeddings   30522*768 + 512*768 + 2*768 + LayerNorm 2*768   = 23,837,184
  //   per layer    qkv 768*2304 + 2304                              =  1,771,776
  //                attention output 768*768 + 768                   =    590,592
  //                FFN 768*3072 + 3072 + 3072*768 + 768             =  4,722,432
  //                two LayerNorms 2 * 2*768                         =      3,072
  //                                                        layer    =  7,087,872
  //   12 layers                                                     = 85,054,464
  //   MLM head     dense 768*768 + 768, LayerNorm 2*768, bias 30522 =    622,650
  //   total                                                         = 109,514,298
  // (the count Hugging Face reports for bert-base-uncased's BertForMaskedLM, which has no pooler).
  ModelOptions o;
  o.vocab_size = 30522;
  Generator gen(1);
  auto m = build_model("bert_base", o, gen);
  EXPECT_EQ(m->num_parameters(), 109514298);
  auto bert = std::dynamic_pointer_cast<BertForMaskedLM>(m);
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->options().intermediate_size(), 3072);
  // Init: truncated normal at 2 std for matrices, zero biases, unit layer-norm scales.
  const auto table = bert->word_embedding_weight().to_vector();
  double sq = 0, most = 0;
  for (float v : table) {
    sq += static_cast<double>(v) * v;
    most = std::max(most, static_cast<double>(std::fabs(v)));
  }
  const double stddev = std::sqrt(sq / static_cast<double>(table.size()));
  EXPECT_NEAR(stddev, 0.02 * 0.8796, 0.0005);  // the std of N(0, 1) truncated at +-2 is 0.8796
  EXPECT_LE(most, 0.04 + 1e-6);
  for (const auto& [name, p] : m->named_parameters()) {
    if (name == "bert.layers.0.attention.qkv.bias" || name == "mlm_head.decoder_bias") {
      EXPECT_EQ(p.to_vector(), std::vector<float>(p.numel(), 0.0f)) << name;
    }
    if (name == "bert.layers.11.output_norm.weight") {
      EXPECT_EQ(p.to_vector(), std::vector<float>(p.numel(), 1.0f));
    }
  }
}

TEST(Bert, PresetsAndOverridesFromTheRegistry) {
  ModelOptions o;
  o.vocab_size = 100;
  Generator gen(1);
  struct Preset { const char* name; int64_t layers, hidden, heads; };
  for (const Preset& p : {Preset{"bert_tiny", 2, 128, 2}, Preset{"bert_mini", 4, 256, 4},
                          Preset{"bert_small", 4, 512, 8}}) {
    auto m = std::dynamic_pointer_cast<BertForMaskedLM>(build_model(p.name, o, gen));
    ASSERT_NE(m, nullptr) << p.name;
    EXPECT_EQ(m->options().layers, p.layers) << p.name;
    EXPECT_EQ(m->options().hidden, p.hidden) << p.name;
    EXPECT_EQ(m->options().heads, p.heads) << p.name;
    EXPECT_EQ(m->options().vocab_size, 100);
  }
  o.bert.hidden = 64;
  o.bert.layers = 3;
  o.bert.max_position = 32;
  o.bert.hidden_dropout = 0.0f;  // 0 is a real value for dropouts, not "keep"
  auto m = std::dynamic_pointer_cast<BertForMaskedLM>(build_model("bert_tiny", o, gen));
  EXPECT_EQ(m->options().hidden, 64);
  EXPECT_EQ(m->options().layers, 3);
  EXPECT_EQ(m->options().heads, 2);  // kept from the preset
  EXPECT_EQ(m->options().intermediate_size(), 256);
  EXPECT_EQ(m->options().max_position, 32);
  EXPECT_EQ(m->options().hidden_dropout, 0.0f);
  EXPECT_FLOAT_EQ(m->options().attention_dropout, 0.1f);

  ModelOptions no_vocab;
  const std::string msg = error_of([&] { build_model("bert_base", no_vocab, gen); });
  EXPECT_TRUE(contains(msg, "vocabulary")) << msg;
  o.bert.heads = 5;  // 64 is not divisible by 5
  EXPECT_TRUE(contains(error_of([&] { build_model("bert_tiny", o, gen); }), "divisible")) << msg;
  const auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "bert_base"), names.end());
}

TEST(Bert, ShapesAndMlmOutputs) {
  Generator gen(2);
  BertForMaskedLM m(micro_options(), gen);
  const Tensor ids = random_ids(3, 5, 11, 1);
  EXPECT_EQ(forward_no_grad(m, ids).shape(), (Shape{3, 5, 11}));
  EXPECT_EQ(forward_no_grad(*m.encoder(), ids).shape(), (Shape{3, 5, 8}));

  std::vector<int64_t> labels(15, -100);
  labels[1] = 4;
  labels[7] = 0;
  labels[14] = 10;
  const MlmOutput out = m.mlm(ids, Tensor(), ids_tensor(labels, 3, 5));
  EXPECT_EQ(out.logits.shape(), (Shape{3, 11}));
  EXPECT_EQ(int_values(out.targets), (std::vector<int64_t>{4, 0, 10}));
  EXPECT_EQ(out.loss.numel(), 1);

  // The gathered logits are the full forward's rows at the predicted positions, and the loss is
  // their mean cross-entropy.
  const Tensor full = forward_no_grad(m, ids).reshape({15, 11});
  const Tensor expect = cat({full.narrow(0, 1, 1), full.narrow(0, 7, 1), full.narrow(0, 14, 1)}, 0);
  EXPECT_TRUE(all_close(out.logits, expect, 1e-5, 1e-4));
  EXPECT_NEAR(out.loss.item(), cross_entropy(expect, out.targets).item(), 1e-5);

  EXPECT_TRUE(contains(error_of([&] { m.forward(random_ids(1, 17, 11, 2)); }), "max_position"));
  EXPECT_TRUE(contains(error_of([&] { m.mlm(ids, Tensor(), random_ids(3, 4, 11, 2)); }), "labels"));
  EXPECT_TRUE(contains(error_of([&] { m.mlm(ids, Tensor::ones({3, 4}), ids); }), "attention_mask"));
}

TEST(Bert, NoPredictedPositionGivesZeroLossAndZeroGradients) {
  Generator gen(3);
  BertForMaskedLM m(micro_options(), gen);
  const Tensor ids = random_ids(2, 4, 11, 3);
  const MlmOutput out = m.mlm(ids, Tensor(), Tensor::full({2, 4}, -100.0, DType::Int64));
  EXPECT_EQ(out.loss.item(), 0.0f);
  EXPECT_EQ(int_values(out.targets), (std::vector<int64_t>{-100}));
  out.loss.backward();
  const Tensor g = m.word_embedding_weight().grad();
  if (g.defined()) {
    EXPECT_EQ(g.to_vector(), std::vector<float>(g.numel(), 0.0f));
  }
}

TEST(Bert, TiedDecoderWeightIsOneParameterWithGradientFromBothUses) {
  Generator gen(4);
  BertForMaskedLM m(micro_options(), gen);
  const auto named = m.named_parameters();
  int table_entries = 0;
  std::set<std::string> names;
  for (const auto& [name, p] : named) {
    names.insert(name);
    if (p.same(m.word_embedding_weight())) ++table_entries;
  }
  EXPECT_EQ(table_entries, 1);
  EXPECT_TRUE(names.count("bert.embeddings.word_embeddings.weight"));
  EXPECT_TRUE(names.count("mlm_head.decoder_bias"));
  EXPECT_EQ(m.state_dict().size(), named.size());  // registered once: no second name either

  // Finite differences over rows that are looked up (both uses) and rows only the decoder
  // reads: a gradient from one use alone fails on the first kind.
  const Tensor ids = ids_tensor({3, 5, 5, 1, 9, 2, 3, 7}, 2, 4);
  const Tensor labels = ids_tensor({-100, 6, -100, 1, 3, -100, -100, 9}, 2, 4);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0}, {2, 4});
  const int64_t d = 8;
  std::vector<int64_t> elements;
  for (int64_t r : {3, 5, 9, 0, 6, 10})
    for (int64_t c : {0, 5}) elements.push_back(r * d + c);
  EXPECT_TRUE(check_param_grad(m, m.word_embedding_weight(), [&] { return m.mlm(ids, mask, labels).loss; }, elements));
  // And through the rest of the network: the fused qkv weight of the first layer, the
  // position table, the head's dense layer and the decoder bias.
  for (const auto& [name, p] : named) {
    if (name != "bert.layers.0.attention.qkv.weight" && name != "bert.embeddings.position_embeddings.weight" &&
        name != "mlm_head.dense.weight" && name != "mlm_head.decoder_bias")
      continue;
    std::vector<int64_t> picks;
    for (int64_t i = 0; i < p.numel(); i += std::max<int64_t>(1, p.numel() / 7)) picks.push_back(i);
    if (name == "bert.embeddings.position_embeddings.weight") picks = {0, 9, 18, 27};  // positions 0..3 only
    EXPECT_TRUE(check_param_grad(m, p, [&] { return m.mlm(ids, mask, labels).loss; }, picks)) << name;
  }
}

TEST(Bert, KeyPaddingMaskHidesPaddedTokens) {
  Generator gen(5);
  BertForMaskedLM m(micro_options(), gen);
  m.eval();
  // Sequence 0 has two padded positions at the end; sequence 1 none.
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 6});
  const Tensor a = ids_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2}, 2, 6);
  const Tensor b = ids_tensor({1, 2, 3, 4, 9, 0, 7, 8, 9, 10, 1, 2}, 2, 6);  // padded ids changed
  NoGradGuard no_grad;
  const Tensor ha = m.encoder()->forward(a, mask), hb = m.encoder()->forward(b, mask);
  EXPECT_TRUE(all_close(ha.narrow(1, 0, 4), hb.narrow(1, 0, 4), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(ha.select(0, 1), hb.select(0, 1), 0, 0));
  // Without the mask the changed tokens do reach the others: the check above can fail.
  const Tensor ua = m.encoder()->forward(a, Tensor()), ub = m.encoder()->forward(b, Tensor());
  EXPECT_FALSE(all_close(ua.narrow(1, 0, 4), ub.narrow(1, 0, 4), 1e-4, 1e-4));
  // A mask of all ones is the same as no mask.
  EXPECT_TRUE(all_close(m.encoder()->forward(a, Tensor::ones({2, 6})), ua, 1e-6, 1e-6));
}

TEST(Bert, EvalIsDeterministicAndTrainingDropsOut) {
  Generator gen(6);
  BertForMaskedLM m(micro_options(0.3f), gen);
  const Tensor ids = random_ids(2, 6, 11, 6);
  m.train();
  const Tensor t1 = forward_no_grad(m, ids), t2 = forward_no_grad(m, ids);
  EXPECT_FALSE(all_close(t1, t2, 1e-4, 1e-4));  // fresh dropout masks each call
  m.eval();
  const Tensor e1 = forward_no_grad(m, ids), e2 = forward_no_grad(m, ids);
  EXPECT_TRUE(all_close(e1, e2, 0, 0));
  EXPECT_FALSE(all_close(e1, t1, 1e-4, 1e-4));
}

TEST(Bert, SameSeedSameWeightsAndStateDictRoundTrip) {
  Generator g1(7), g2(7), g3(8);
  BertForMaskedLM a(micro_options(), g1), same(micro_options(), g2), other(micro_options(), g3);
  const auto pa = a.parameters(), ps = same.parameters(), po = other.parameters();
  ASSERT_EQ(pa.size(), ps.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].to_vector(), ps[i].to_vector()) << "parameter " << i;
  EXPECT_NE(pa[0].to_vector(), po[0].to_vector());
  a.eval();
  other.eval();
  const Tensor ids = random_ids(2, 5, 11, 7);
  const Tensor ya = forward_no_grad(a, ids);
  EXPECT_FALSE(all_close(forward_no_grad(other, ids), ya, 1e-4, 1e-4));

  // The temp folder, not the build tree: the GPU check runs this binary where no build tree exists.
  const std::string path = mt::testing::make_temp_dir("mt_test_bert_state") + "/state.mtar";
  Archive ar;
  ar.add("model.", a.state_dict());
  save_archive(path, ar);
  const Archive loaded = load_archive(path);
  std::remove(path.c_str());
  other.load_state_dict(loaded.with_prefix("model."));
  EXPECT_TRUE(all_close(forward_no_grad(other, ids), ya, 0, 0));
  // The tie survives loading: the decoder still reads the (now loaded) embedding table.
  {
    NoGradGuard no_grad;
    Tensor(other.word_embedding_weight()).mul_(2.0f);
  }
  EXPECT_FALSE(all_close(forward_no_grad(other, ids), ya, 1e-4, 1e-4));
}

TEST(Bert, TinyBertOverfitsAFixedBatch) {
  BertOptions o;
  o.vocab_size = 50;
  o.hidden = 32;
  o.layers = 2;
  o.heads = 2;
  o.max_position = 8;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  Generator gen(9);
  BertForMaskedLM m(o, gen);
  // A fixed batch: 4 sequences of 8, with 3 positions each replaced by a [MASK] id (0) and
  // predicted, plus one predicted position left unmasked (BERT's "keep" case).
  const Tensor original = random_ids(4, 8, 49, 10);  // ids 0..48, shifted below to 1..49
  std::vector<int64_t> ids(32), labels(32, -100);
  const auto orig = int_values(original);
  for (int64_t i = 0; i < 32; ++i) ids[i] = orig[i] + 1;
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t p : {1, 4, 6}) {
      labels[s * 8 + p] = ids[s * 8 + p];
      ids[s * 8 + p] = 0;
    }
    labels[s * 8 + 2] = ids[s * 8 + 2];
  }
  const Tensor x = ids_tensor(ids, 4, 8), y = ids_tensor(labels, 4, 8);
  mt::optim::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  mt::optim::SGD sgd(m.parameters(), so);
  float first = 0, last = 0;
  int steps = 0;
  for (; steps < 400; ++steps) {
    sgd.zero_grad();
    const MlmOutput out = m.mlm(x, Tensor(), y);
    last = out.loss.item();
    if (steps == 0) first = last;
    if (last < 0.05f) break;
    out.loss.backward();
    sgd.step();
  }
  EXPECT_GT(first, 3.0f);  // ~ln 50 at the start
  EXPECT_LT(last, 0.05f) << "after " << steps << " steps";
  std::printf("tiny BERT: loss %.3f -> %.4f in %d SGD steps\n", first, last, steps);
}

// ------------------------------------------------------------------------ CPU vs GPU

TEST(BertGpu, MlmLossAndGradientsMatchTheCpu) {
  MT_REQUIRE_GPU();
  Generator g1(11), g2(11);
  BertForMaskedLM cpu(micro_options(), g1), gpu(micro_options(), g2);
  gpu.to(Device::cuda());
  const Tensor ids = random_ids(3, 6, 11, 12);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0},
                                          {3, 6});
  std::vector<int64_t> lab(18, -100);
  for (int64_t i : {0, 3, 5, 8, 13}) lab[i] = (i * 7) % 11;
  const Tensor labels = ids_tensor(lab, 3, 6);
  const MlmOutput c = cpu.mlm(ids, mask, labels);
  const MlmOutput g = gpu.mlm(ids.to(Device::cuda()), mask.to(Device::cuda()), labels.to(Device::cuda()));
  EXPECT_TRUE(all_close(g.logits, c.logits, 1e-4, 1e-3));
  EXPECT_NEAR(g.loss.item(), c.loss.item(), 1e-4);
  c.loss.backward();
  g.loss.backward();
  const auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i)
    EXPECT_TRUE(all_close(pg[i].second.grad(), pc[i].second.grad(), 1e-4, 1e-3)) << pc[i].first;
  // The attention layer alone, including the fused split's backward on the device.
  Generator g3(13), g4(13);
  MultiHeadAttention ac(8, 2, 0.0f, g3), ag(8, 2, 0.0f, g4);
  ag.to(Device::cuda());
  const Tensor x = random_tensor({2, 5, 8}, 14);
  Tensor xc = x.detach().clone(), xg = x.to(Device::cuda());
  xc.set_requires_grad(true);
  xg.set_requires_grad(true);
  const Tensor r = random_tensor({2, 5, 8}, 15);
  sum(ac.forward(xc, Tensor()) * r).backward();
  sum(ag.forward(xg, Tensor()) * r.to(Device::cuda())).backward();
  EXPECT_TRUE(all_close(xg.grad(), xc.grad(), 1e-4, 1e-3));
  EXPECT_TRUE(all_close(ag.qkv()->weight().grad(), ac.qkv()->weight().grad(), 1e-4, 1e-3));
}
