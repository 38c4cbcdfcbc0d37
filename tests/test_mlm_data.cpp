// The masked-language-model data pipeline: corpus files and packing (data/text_corpus.h),
// masking proportions and rules (data/mlm_masking.h), the prefetching MlmLoader (coverage,
// determinism, resume, rank shards, fixed eval masks, shutdown) and build_text_data.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/test_helpers.h"
#include "core/error.h"
#include "core/random.h"
#include "data/mlm_loader.h"
#include "data/mlm_masking.h"
#include "data/text_corpus.h"
#include "data/text_data.h"
#include "data/wordpiece_tokenizer.h"

using namespace mt::data;
using mt::core::DType;
using mt::core::Error;
using mt::core::Generator;

namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::string make_temp_dir() { return mt::testing::make_temp_dir("mt_mlm"); }

using mt::testing::error_of;
using mt::testing::contains;

using mt::testing::write_file;

constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;

MlmMasker make_masker(int64_t vocab, float prob = 0.15f) {
  MlmMaskingOptions o;
  o.mask_prob = prob;
  o.vocab_size = vocab;
  o.mask_id = kMask;
  o.special_ids = {kPad, kUnk, kCls, kSep, kMask};
  return MlmMasker(o);
}

// A tokenizer whose words are w0 ... w{n-1}: text "w3 w7" is ids {5 + 3, 5 + 7}.
WordPieceTokenizer word_tokenizer(int n) {
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 0; i < n; ++i) vocab.push_back("w" + std::to_string(i));
  return WordPieceTokenizer(vocab, true, "word vocabulary");
}

// Sequences that identify themselves: sequence i is [CLS] 5+i, random ids, [SEP], then a random
// amount of [PAD] (ids 5+i are unique while i < vocab - 5).
std::vector<int32_t> numbered_sequences(int64_t n, int64_t seq_len, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> tokens;
  Generator gen(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t real = seq_len - 1 - int64_t(gen.below(seq_len / 2));  // some padding
    tokens.push_back(kCls);
    for (int64_t j = 1; j < seq_len; ++j) {
      if (j < real - 1) tokens.push_back(j == 1 ? int32_t(5 + i % (vocab - 5)) : int32_t(5 + gen.below(vocab - 5)));
      else if (j == real - 1) tokens.push_back(kSep);
      else tokens.push_back(kPad);
    }
  }
  return tokens;
}

// The original tokens of a masked batch row: the label where one is set, else the input.
Ids original_row(const Batch& b, int64_t row) {
  const int64_t s = b.inputs.shape()[1];
  const int64_t* x = b.inputs.data<int64_t>() + row * s;
  const int64_t* y = b.targets.data<int64_t>() + row * s;
  Ids out(s);
  for (int64_t j = 0; j < s; ++j) out[j] = int32_t(y[j] != kIgnoreLabel ? y[j] : x[j]);
  return out;
}

std::vector<Batch> whole_epoch(MlmLoader& loader, int64_t epoch, int64_t first_batch = 0) {
  loader.start_epoch(epoch, first_batch);
  std::vector<Batch> batches;
  for (Batch b; loader.next(b);) batches.push_back(b);
  return batches;
}

bool same_batch(const Batch& a, const Batch& b) {
  if (a.index != b.index || a.inputs.shape() != b.inputs.shape()) return false;
  const int64_t n = a.inputs.numel();
  return std::equal(a.inputs.data<int64_t>(), a.inputs.data<int64_t>() + n, b.inputs.data<int64_t>()) &&
         std::equal(a.targets.data<int64_t>(), a.targets.data<int64_t>() + n, b.targets.data<int64_t>()) &&
         std::equal(a.mask.data<float>(), a.mask.data<float>() + n, b.mask.data<float>());
}

std::shared_ptr<const MlmMasker> shared_masker(int64_t vocab) {
  return std::make_shared<const MlmMasker>(make_masker(vocab));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Masking

TEST(MlmMasking, ProportionsFollowBertsRecipe) {
  const int64_t vocab = 1000, seq_len = 128, sequences = 3000;
  const MlmMasker masker = make_masker(vocab);
  const std::vector<int32_t> tokens = numbered_sequences(sequences, seq_len, vocab, 1);
  std::vector<int64_t> inputs(seq_len), labels(seq_len);
  int64_t maskable = 0, chosen = 0, as_mask = 0, as_random = 0, kept = 0;
  for (int64_t i = 0; i < sequences; ++i) {
    const int32_t* t = tokens.data() + i * seq_len;
    Generator gen(1000 + i);
    const int64_t n = masker.apply(t, seq_len, gen, inputs.data(), labels.data());
    int64_t n_labels = 0;
    for (int64_t j = 0; j < seq_len; ++j) {
      const bool special = t[j] < 5;
      maskable += !special;
      if (special) {  // never chosen, never changed
        ASSERT_EQ(labels[j], kIgnoreLabel);
        ASSERT_EQ(inputs[j], t[j]);
        continue;
      }
      if (labels[j] == kIgnoreLabel) {
        ASSERT_EQ(inputs[j], t[j]);
        continue;
      }
      ASSERT_EQ(labels[j], t[j]);
      ++n_labels;
      if (inputs[j] == kMask) ++as_mask;
      else if (inputs[j] == t[j]) ++kept;
      else {
        ++as_random;
        ASSERT_GE(inputs[j], 5) << "a random replacement must not be a special token";
        ASSERT_LT(inputs[j], vocab);
      }
    }
    ASSERT_EQ(n, n_labels);
    chosen += n_labels;
  }
  const double p = double(chosen) / double(maskable);
  EXPECT_NEAR(p, 0.15, 0.01) << chosen << " of " << maskable;
  EXPECT_NEAR(double(as_mask) / chosen, 0.8, 0.015);
  EXPECT_NEAR(double(as_random) / chosen, 0.1, 0.01);
  EXPECT_NEAR(double(kept) / chosen, 0.1, 0.01);
}

TEST(MlmMasking, AtLeastOnePositionIsChosen) {
  const MlmMasker rare = make_masker(50, 0.001f);
  const Ids seq = {kCls, 10, 11, 12, 13, kSep, kPad, kPad};
  std::vector<int64_t> inputs(seq.size()), labels(seq.size());
  std::set<int64_t> positions;
  for (uint64_t key = 0; key < 200; ++key) {
    Generator gen(key);
    ASSERT_EQ(rare.apply(seq.data(), int64_t(seq.size()), gen, inputs.data(), labels.data()), 1);
    for (size_t j = 0; j < seq.size(); ++j)
      if (labels[j] != kIgnoreLabel) {
        positions.insert(int64_t(j));
        EXPECT_EQ(labels[j], seq[j]);
      }
  }
  // The forced choice is uniform over the maskable positions 1..4, never a special one.
  EXPECT_EQ(positions, (std::set<int64_t>{1, 2, 3, 4}));
  // Nothing maskable: nothing chosen, no failure.
  const Ids specials = {kCls, kUnk, kSep, kPad};
  Generator gen(1);
  EXPECT_EQ(rare.apply(specials.data(), 4, gen, inputs.data(), labels.data()), 0);
  EXPECT_TRUE(std::all_of(labels.begin(), labels.begin() + 4, [](int64_t l) { return l == kIgnoreLabel; }));
}

TEST(MlmMasking, DeterministicForAKey) {
  const MlmMasker masker = make_masker(500);
  const std::vector<int32_t> seq = numbered_sequences(1, 64, 500, 3);
  std::vector<int64_t> a(64), la(64), b(64), lb(64), c(64), lc(64);
  Generator g1(42), g2(42), g3(43);
  masker.apply(seq.data(), 64, g1, a.data(), la.data());
  masker.apply(seq.data(), 64, g2, b.data(), lb.data());
  masker.apply(seq.data(), 64, g3, c.data(), lc.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lc);
}

TEST(MlmMasking, RejectsBadInput) {
  EXPECT_TRUE(contains(error_of([] { make_masker(100, 0.0f); }), "mask_prob"));
  EXPECT_TRUE(contains(error_of([] { make_masker(100, 1.5f); }), "mask_prob"));
  EXPECT_THROW(make_masker(3), Error);  // [MASK] = 4 is outside
  const MlmMasker masker = make_masker(100);
  const Ids bad = {kCls, 7, 100, kSep};
  std::vector<int64_t> x(4), y(4);
  Generator gen(0);
  EXPECT_TRUE(contains(error_of([&] { masker.apply(bad.data(), 4, gen, x.data(), y.data()); }),
                       "token id 100 at position 2 is outside the vocabulary"));
}

// ---------------------------------------------------------------------------------------------
// Corpus files and packing

TEST(TextCorpus, FilesGlobSkipBinaryAndDuplicates) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/b.txt", "beta\n");
  write_file(dir + "/a", "alpha\n");
  write_file(dir + "/a.dat", "index");
  write_file(dir + "/nul", std::string("text\0more", 9));
  fs::create_symlink(dir + "/a", dir + "/a.u8");
  const std::vector<std::string> files = expand_corpus_files({dir + "/*", dir + "/b.txt"});
  EXPECT_EQ(files, (std::vector<std::string>{dir + "/a", dir + "/b.txt"}));
  // A folder stands for its files.
  EXPECT_EQ(expand_corpus_files({dir}), files);

  const std::string none = error_of([&] { expand_corpus_files({dir + "/nothing*"}); });
  EXPECT_TRUE(contains(none, "no files match " + dir + "/nothing*"));
  EXPECT_TRUE(contains(none, "fortunes"));
  EXPECT_TRUE(contains(none, "data.text.corpus"));
  EXPECT_TRUE(contains(error_of([&] { expand_corpus_files({dir + "/*.dat", dir + "/nul"}); }),
                       "are all binary"));
  EXPECT_TRUE(contains(error_of([] { expand_corpus_files({}); }), "data.text.corpus is empty"));
}

TEST(TextCorpus, DocumentsEndAtBlankAndPercentLines) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/f1", "one a\none b\n%\ntwo\n\n\n  \nthree\r\n%\r\n");
  write_file(dir + "/f2", "four\nfour b");  // no final newline
  std::vector<std::string> docs;
  for_each_document({dir + "/f1", dir + "/f2"}, [&](std::string_view d) { docs.emplace_back(d); });
  EXPECT_EQ(docs, (std::vector<std::string>{"one a\none b", "two", "three\r", "four\nfour b"}));
}

TEST(TextCorpus, PacksConsecutiveTokensIntoClsSepSequences) {
  // 60 documents of 1 to 25 words; every token must come out once, in order.
  const std::string dir = make_temp_dir();
  const WordPieceTokenizer tok = word_tokenizer(1000);
  Generator gen(5);
  std::vector<Ids> docs;
  std::string text;
  int next_word = 0;
  for (int d = 0; d < 60; ++d) {
    Ids doc;
    for (int k = 0, n = 1 + int(gen.below(25)); k < n; ++k) {
      doc.push_back(5 + next_word % 1000);
      text += "w" + std::to_string(next_word++ % 1000) + (k % 7 == 6 ? "\n" : " ");
    }
    text += d % 3 == 0 ? "\n%\n" : "\n\n";
    docs.push_back(doc);
  }
  write_file(dir + "/corpus", text);
  for (const int64_t seq_len : {8, 9, 16, 33}) {
    const PackedCorpus pc = pack_corpus({dir + "/corpus"}, tok, seq_len, 0.0);
    ASSERT_EQ(pc.train.size() % seq_len, 0u);
    EXPECT_EQ(pc.eval_sequences(), 0);
    EXPECT_EQ(pc.documents, 60);
    Ids stream;  // the body tokens, [SEP] included, of all sequences in order
    for (int64_t i = 0; i < pc.train_sequences(); ++i) {
      const int32_t* s = pc.train.data() + i * seq_len;
      ASSERT_EQ(s[0], kCls) << "sequence " << i;
      int64_t end = seq_len;
      while (s[end - 1] == kPad) --end;  // pads only at the end
      ASSERT_GE(end, 3);
      ASSERT_EQ(s[end - 1], kSep) << "sequence " << i << " must close with [SEP]";
      ASSERT_NE(s[1], kSep) << "a sequence never starts with a document separator";
      ASSERT_NE(s[end - 2], kSep) << "no [SEP] [SEP]";
      for (int64_t j = 1; j < end - 1; ++j) {
        ASSERT_NE(s[j], kPad);
        ASSERT_NE(s[j], kCls);
      }
      // Only the last sequence, or one cut at a document boundary, is short (by one).
      if (i + 1 < pc.train_sequences()) {
        ASSERT_GE(end, seq_len - 1) << "sequence " << i;
      }
      stream.insert(stream.end(), s + 1, s + end - 1);
      stream.push_back(kSep);
    }
    // Without the [SEP]s the stream is exactly the documents' tokens; the [SEP]s fall exactly
    // on document boundaries or sequence ends.
    Ids words, expected;
    for (const int32_t t : stream)
      if (t != kSep) words.push_back(t);
    for (const Ids& d : docs) expected.insert(expected.end(), d.begin(), d.end());
    EXPECT_EQ(words, expected) << "seq_len " << seq_len;
    EXPECT_EQ(pc.tokens, int64_t(expected.size()));
    int64_t boundaries = 0;  // document ends seen as a [SEP] right after a document's last token
    size_t d = 0, in_doc = 0;
    for (const int32_t t : stream) {
      if (t == kSep) {
        if (in_doc == docs[d].size() && in_doc > 0) ++boundaries, ++d, in_doc = 0;
        continue;
      }
      ASSERT_LT(d, docs.size());
      ASSERT_EQ(t, docs[d][in_doc]);
      ++in_doc;
    }
    EXPECT_EQ(boundaries, 60) << "every document ends at a [SEP], seq_len " << seq_len;
  }
}

TEST(TextCorpus, EvalSplitTakesEveryKthSequence) {
  const std::string dir = make_temp_dir();
  std::string text;
  for (int i = 0; i < 400; ++i) text += "w" + std::to_string(i % 50) + " ";
  write_file(dir + "/corpus", text);
  const WordPieceTokenizer tok = word_tokenizer(50);
  const PackedCorpus all = pack_corpus({dir + "/corpus"}, tok, 10, 0.0);
  const PackedCorpus split = pack_corpus({dir + "/corpus"}, tok, 10, 0.25);
  const int64_t n = all.train_sequences();
  ASSERT_EQ(n, 50);  // 400 tokens, 8 per sequence
  EXPECT_EQ(split.eval_sequences(), n / 4);
  EXPECT_EQ(split.train_sequences() + split.eval_sequences(), n);
  // Sequences 3, 7, 11, ... are the eval ones.
  for (int64_t k = 0; k < split.eval_sequences(); ++k)
    EXPECT_TRUE(std::equal(split.eval.begin() + k * 10, split.eval.begin() + (k + 1) * 10,
                           all.train.begin() + (4 * k + 3) * 10));
  EXPECT_TRUE(std::equal(split.train.begin(), split.train.begin() + 30, all.train.begin()));
}

TEST(TextCorpus, RejectsBadInput) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/empty", "%\n\n%\n   \n");
  write_file(dir + "/small", "w1 w2 w3");
  const WordPieceTokenizer tok = word_tokenizer(10);
  EXPECT_TRUE(contains(error_of([&] { pack_corpus({dir + "/empty"}, tok, 16, 0.0); }), "holds no text"));
  EXPECT_TRUE(contains(error_of([&] { pack_corpus({dir + "/small"}, tok, 7, 0.0); }),
                       "seq_len must be >= 8"));
  EXPECT_TRUE(contains(error_of([&] { pack_corpus({dir + "/small"}, tok, 8, 0.5); }),
                       "too few for eval_fraction"));
  EXPECT_TRUE(contains(error_of([&] { pack_corpus({dir + "/small"}, tok, 8, 1.0); }), "eval_fraction"));
  EXPECT_TRUE(contains(error_of([&] { pack_corpus({dir + "/absent"}, tok, 8, 0.0); }), "cannot be opened"));
}

// ---------------------------------------------------------------------------------------------
// The loader

TEST(MlmLoader, BatchesCoverTheSourceWithMasksAndPadding) {
  const int64_t n = 50, s = 16, vocab = 200;
  std::vector<int32_t> tokens = numbered_sequences(n, s, vocab, 9);
  std::map<int32_t, Ids> by_id;  // sequence i is recognized by its token 5 + i at position 1
  for (int64_t i = 0; i < n; ++i) by_id[5 + int32_t(i)] = Ids(tokens.begin() + i * s, tokens.begin() + (i + 1) * s);
  auto source = std::make_shared<PackedTokenSource>(tokens, s, "numbered");
  MlmLoaderOptions o;
  o.batch_size = 8;
  o.seed = 3;
  MlmLoader loader(source, shared_masker(vocab), o);
  EXPECT_EQ(loader.batches_per_epoch(), 7);
  EXPECT_EQ(loader.seq_len(), s);
  EXPECT_EQ(loader.vocab_size(), vocab);
  EXPECT_EQ(loader.tokens_per_batch(), 8 * s);
  EXPECT_EQ(loader.describe(), "numbered");
  const std::vector<Batch> batches = whole_epoch(loader, 0);
  ASSERT_EQ(batches.size(), 7u);
  std::multiset<int32_t> seen;
  int64_t rows = 0;
  for (size_t k = 0; k < batches.size(); ++k) {
    const Batch& b = batches[k];
    EXPECT_EQ(b.index, int64_t(k));
    ASSERT_EQ(b.inputs.dtype(), DType::Int64);
    ASSERT_EQ(b.targets.dtype(), DType::Int64);
    ASSERT_EQ(b.mask.dtype(), DType::Float32);
    const int64_t rows_here = k < 6 ? 8 : 2;
    ASSERT_EQ(b.inputs.shape(), (mt::core::Shape{rows_here, s}));
    ASSERT_EQ(b.targets.shape(), b.inputs.shape());
    ASSERT_EQ(b.mask.shape(), b.inputs.shape());
    for (int64_t r = 0; r < rows_here; ++r, ++rows) {
      const Ids orig = original_row(b, r);
      ASSERT_TRUE(by_id.count(orig[1])) << "row does not match a source sequence";
      EXPECT_EQ(orig, by_id[orig[1]]);
      seen.insert(orig[1]);
      int64_t labels = 0;
      for (int64_t j = 0; j < s; ++j) {
        EXPECT_EQ(b.mask.data<float>()[r * s + j], orig[j] == kPad ? 0.f : 1.f);
        labels += b.targets.data<int64_t>()[r * s + j] != kIgnoreLabel;
      }
      EXPECT_GE(labels, 1);
    }
  }
  EXPECT_EQ(seen.size(), size_t(n));  // every sequence once
  EXPECT_EQ(rows, n);
  EXPECT_EQ(loader.stats().images, n);
  EXPECT_EQ(loader.stats().threads, 1);
  EXPECT_FALSE([&] { Batch b; return loader.next(b); }());
}

TEST(MlmLoader, DeterministicAcrossRunsPrefetchAndResume) {
  const int64_t s = 12, vocab = 300;
  auto source = std::make_shared<PackedTokenSource>(numbered_sequences(70, s, vocab, 4), s, "numbered");
  MlmLoaderOptions o;
  o.batch_size = 6;
  o.seed = 17;
  MlmLoader a(source, shared_masker(vocab), o);
  o.prefetch_batches = 5;
  MlmLoader b(source, shared_masker(vocab), o);
  const std::vector<Batch> epoch1 = whole_epoch(a, 1);
  const std::vector<Batch> again = whole_epoch(b, 1);
  ASSERT_EQ(epoch1.size(), again.size());
  for (size_t k = 0; k < epoch1.size(); ++k) EXPECT_TRUE(same_batch(epoch1[k], again[k])) << k;
  // Resume at batch 5 gives batches 5.. of the full epoch.
  const std::vector<Batch> resumed = whole_epoch(b, 1, 5);
  ASSERT_EQ(resumed.size(), epoch1.size() - 5);
  for (size_t k = 0; k < resumed.size(); ++k) EXPECT_TRUE(same_batch(resumed[k], epoch1[k + 5])) << k;
  // Another epoch: other order and other masks.
  const std::vector<Batch> epoch2 = whole_epoch(a, 2);
  EXPECT_FALSE(same_batch(epoch1[0], epoch2[0]));
  // Restarting an epoch in the middle of one drops the old batches.
  a.start_epoch(3);
  Batch first;
  ASSERT_TRUE(a.next(first));
  const std::vector<Batch> epoch1_again = whole_epoch(a, 1);
  for (size_t k = 0; k < epoch1.size(); ++k) EXPECT_TRUE(same_batch(epoch1[k], epoch1_again[k])) << k;
  EXPECT_TRUE(contains(error_of([&] { a.start_epoch(0, a.batches_per_epoch() + 1); }), "first_batch"));
}

TEST(MlmLoader, SameSequenceGetsTheSameMaskOnAnyRank) {
  // Without shuffle, rank r of 2 reads sequences r, r+2, ...; a 1-rank loader reads them all.
  const int64_t s = 10, vocab = 100;
  auto source = std::make_shared<PackedTokenSource>(numbered_sequences(20, s, vocab, 8), s, "numbered");
  MlmLoaderOptions o;
  o.batch_size = 1;
  o.shuffle = false;
  MlmLoader all(source, shared_masker(vocab), o);
  o.world_size = 2;
  o.rank = 1;
  MlmLoader odd(source, shared_masker(vocab), o);
  const std::vector<Batch> every = whole_epoch(all, 4), mine = whole_epoch(odd, 4);
  ASSERT_EQ(mine.size(), 10u);
  for (size_t k = 0; k < mine.size(); ++k) {
    Batch expected = every[2 * k + 1];
    expected.index = int64_t(k);
    EXPECT_TRUE(same_batch(mine[k], expected)) << k;
  }
}

TEST(MlmLoader, RankShardsAreDisjoint) {
  const int64_t n = 61, s = 9, vocab = 100;
  auto source = std::make_shared<PackedTokenSource>(numbered_sequences(n, s, vocab, 2), s, "numbered");
  std::set<int32_t> union_ids;
  int64_t total = 0;
  for (int rank = 0; rank < 3; ++rank) {
    MlmLoaderOptions o;
    o.batch_size = 4;
    o.seed = 5;
    o.rank = rank;
    o.world_size = 3;
    o.drop_last = true;
    MlmLoader loader(source, shared_masker(vocab), o);
    EXPECT_EQ(loader.sequences_per_epoch(), 20);
    EXPECT_EQ(loader.batches_per_epoch(), 5);
    for (const Batch& b : whole_epoch(loader, 2))
      for (int64_t r = 0; r < b.inputs.shape()[0]; ++r, ++total) union_ids.insert(original_row(b, r)[1]);
  }
  EXPECT_EQ(total, 60);
  EXPECT_EQ(union_ids.size(), 60u) << "a sequence was read by two ranks";
}

TEST(MlmLoader, FixedMaskEpochForEvaluation) {
  const int64_t s = 16, vocab = 100;
  auto source = std::make_shared<PackedTokenSource>(numbered_sequences(12, s, vocab, 6), s, "eval");
  MlmLoaderOptions o;
  o.batch_size = 5;
  o.shuffle = false;
  o.fixed_mask_epoch = 0;
  MlmLoader eval(source, shared_masker(vocab), o);
  const std::vector<Batch> e0 = whole_epoch(eval, 0), e7 = whole_epoch(eval, 7);
  ASSERT_EQ(e0.size(), 3u);
  for (size_t k = 0; k < e0.size(); ++k) EXPECT_TRUE(same_batch(e0[k], e7[k])) << k;
  o.fixed_mask_epoch = -1;
  MlmLoader varying(source, shared_masker(vocab), o);
  const std::vector<Batch> v0 = whole_epoch(varying, 0), v7 = whole_epoch(varying, 7);
  EXPECT_TRUE(same_batch(v0[0], e0[0]));
  EXPECT_FALSE(same_batch(v7[0], e7[0]));
}

TEST(MlmLoader, ShutsDownPromptlyMidEpoch) {
  const int64_t s = 32, vocab = 1000;
  auto source = std::make_shared<SyntheticTokenSource>(10000, s, vocab, 1, 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    MlmLoaderOptions o;
    o.batch_size = 16;
    o.prefetch_batches = 3;
    MlmLoader loader(source, shared_masker(vocab), o);
    if (i % 2) {
      loader.start_epoch(0);
      Batch b;
      ASSERT_TRUE(loader.next(b));
    }
  }  // each destructor runs with a full queue or with no epoch started
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(MlmLoader, RejectsBadUse) {
  const int64_t s = 8, vocab = 50;
  auto source = std::make_shared<PackedTokenSource>(numbered_sequences(5, s, vocab, 1), s, "five");
  MlmLoaderOptions o;
  o.batch_size = 4;
  MlmLoader loader(source, shared_masker(vocab), o);
  Batch b;
  EXPECT_TRUE(contains(error_of([&] { loader.next(b); }), "start_epoch"));
  o.world_size = 2;
  o.drop_last = true;
  o.batch_size = 3;  // each rank has 2 sequences
  EXPECT_TRUE(contains(error_of([&] { MlmLoader l(source, shared_masker(vocab), o); }),
                       "less than one batch"));
  o = MlmLoaderOptions();
  o.batch_size = 0;
  EXPECT_TRUE(contains(error_of([&] { MlmLoader l(source, shared_masker(vocab), o); }), "batch_size"));
  EXPECT_TRUE(contains(error_of([] { PackedTokenSource p(Ids(10, 5), 4, "ragged"); }),
                       "not a whole number"));
  // A source with ids beyond the masker's vocabulary: the error comes out of next().
  auto wide = std::make_shared<PackedTokenSource>(numbered_sequences(5, s, 500, 1), s, "wide");
  MlmLoader mismatched(wide, shared_masker(10), MlmLoaderOptions());
  mismatched.start_epoch(0);
  EXPECT_TRUE(contains(error_of([&] { mismatched.next(b); }), "outside the vocabulary"));
}

// ---------------------------------------------------------------------------------------------
// build_text_data

TEST(TextData, BuildsVocabularyLoadersAndDescriptions) {
  const std::string dir = make_temp_dir();
  std::string text;
  Generator gen(2);
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "mat", "dog", "ran", "far",
                                          "away", "from", "home", "quickly", "running", "jumped"};
  for (int d = 0; d < 300; ++d) {
    for (int k = 0, n = 3 + int(gen.below(30)); k < n; ++k) text += words[gen.below(words.size())] + " ";
    text += ".\n%\n";
  }
  write_file(dir + "/part1", text.substr(0, text.size() / 2));
  write_file(dir + "/part2", text.substr(text.size() / 2));
  write_file(dir + "/part1.dat", std::string("\0\0\0\2", 4));
  TextDataOptions opt;
  opt.corpus = {dir + "/part*"};
  opt.vocab_size = 200;
  opt.seq_len = 32;
  opt.eval_fraction = 0.1f;
  TextLoaderSettings ls;
  ls.batch_size = 8;
  ls.eval_batch_size = 16;
  const std::string out = dir + "/run";
  const TextData data = build_text_data(opt, ls, out);
  ASSERT_TRUE(data.tokenizer);
  ASSERT_TRUE(data.train);
  ASSERT_TRUE(data.eval);
  EXPECT_EQ(data.vocab_size, data.tokenizer->vocab_size());
  EXPECT_LE(data.vocab_size, 200);
  EXPECT_EQ(data.unknown_tokens, 0);
  EXPECT_GT(data.corpus_tokens, 3000);
  const int64_t n_train = data.train->source().size(), n_eval = data.eval->source().size();
  EXPECT_EQ(data.describe_train, "text corpus: " + std::to_string(n_train) +
                                     " sequences of 32 tokens from 2 files (" + dir + "/part*)");
  EXPECT_TRUE(contains(data.describe_eval, "text corpus (eval): " + std::to_string(n_eval) + " sequences"));
  EXPECT_NEAR(double(n_eval) / double(n_train + n_eval), 0.1, 0.02);
  EXPECT_EQ(data.eval->batch_size(), 16);
  EXPECT_TRUE(contains(data.vocab_source, "saved to " + out + "/vocab.txt"));
  // vocab.txt reads back as the same vocabulary.
  const WordPieceTokenizer saved = WordPieceTokenizer::from_file(out + "/vocab.txt", true);
  EXPECT_EQ(saved.tokens(), data.tokenizer->tokens());
  // And a run given that file as vocab_file gets the same sequences.
  TextDataOptions with_file = opt;
  with_file.vocab_file = out + "/vocab.txt";
  const TextData again = build_text_data(with_file, ls, "");
  ASSERT_EQ(again.train->source().size(), n_train);
  Ids x(32), y(32);
  for (int64_t i = 0; i < n_train; i += 7) {
    data.train->source().read(i, x.data());
    again.train->source().read(i, y.data());
    ASSERT_EQ(x, y) << i;
  }
  // A real batch: text ids decode back to the corpus words.
  data.train->start_epoch(0);
  Batch b;
  ASSERT_TRUE(data.train->next(b));
  const Ids row = original_row(b, 0);
  const std::string decoded = data.tokenizer->decode(row);
  EXPECT_EQ(decoded.rfind("[CLS] ", 0), 0u) << decoded;
  // Evaluation only: no train loader.
  ls.build_train = false;
  EXPECT_FALSE(build_text_data(opt, ls, "").train);
}

TEST(TextData, SyntheticTokens) {
  TextDataOptions opt;
  opt.type = "synthetic_tokens";
  opt.synthetic_sequences = 100;
  opt.synthetic_vocab = 64;
  opt.seq_len = 16;
  opt.eval_fraction = 0.05f;
  TextLoaderSettings ls;
  ls.batch_size = 10;
  ls.seed = 4;
  const TextData data = build_text_data(opt, ls, "");
  EXPECT_FALSE(data.tokenizer);
  EXPECT_EQ(data.vocab_size, 64);
  ASSERT_TRUE(data.train && data.eval);
  EXPECT_EQ(data.train->source().size(), 100);
  EXPECT_EQ(data.eval->source().size(), 5);
  EXPECT_EQ(data.describe_train, "synthetic tokens: 100 sequences of 16 tokens, vocabulary 64");
  data.train->start_epoch(0);
  Batch b;
  ASSERT_TRUE(data.train->next(b));
  ASSERT_EQ(b.inputs.shape(), (mt::core::Shape{10, 16}));
  for (int64_t i = 0; i < b.mask.numel(); ++i) ASSERT_EQ(b.mask.data<float>()[i], 1.f);
  for (int64_t r = 0; r < 10; ++r)
    for (const int32_t t : original_row(b, r)) ASSERT_TRUE(t >= 5 && t < 64);
  // Train and eval sequences differ.
  Ids t0(16), e0(16);
  data.train->source().read(0, t0.data());
  data.eval->source().read(0, e0.data());
  EXPECT_NE(t0, e0);
  opt.eval_fraction = 0;
  EXPECT_FALSE(build_text_data(opt, ls, "").eval);
}

TEST(TextData, ErrorsNameTheField) {
  TextDataOptions opt;
  opt.type = "words";
  EXPECT_TRUE(contains(error_of([&] { build_text_data(opt, {}, ""); }), "text, synthetic_tokens"));
  opt.type = "text";
  opt.corpus = {"/nonexistent/mt_corpus_*"};
  EXPECT_TRUE(contains(error_of([&] { build_text_data(opt, {}, ""); }), "'fortunes' package"));
  opt.corpus = {"/usr/share/games/fortunes/*"};
  opt.seq_len = 4;
  EXPECT_TRUE(contains(error_of([&] { build_text_data(opt, {}, ""); }), "seq_len must be >= 8"));
  opt.type = "synthetic_tokens";
  opt.synthetic_vocab = 5;
  opt.seq_len = 16;
  EXPECT_TRUE(contains(error_of([&] { build_text_data(opt, {}, ""); }), "synthetic_vocab"));
}

// A vocabulary that does not fit the corpus (another language, or only its special tokens):
// [UNK] is never predicted, so nearly all [UNK] leaves nothing to learn. Refused before
// training, as a config error (exit 3), naming the share and the way out.
TEST(TextData, ACorpusOfMostlyUnknownTokensIsRefused) {
  const std::string dir = make_temp_dir();
  std::string text;
  for (int d = 0; d < 200; ++d) text += "alpha beta gamma delta epsilon zeta eta theta iota kappa .\n\n";
  write_file(dir + "/corpus", text);
  TextDataOptions opt;
  opt.corpus = {dir + "/corpus"};
  opt.seq_len = 16;
  TextLoaderSettings ls;
  ls.batch_size = 4;
  for (const auto& [words, expected] : std::vector<std::pair<std::string, std::string>>{
           {"", "no token is left to mask"}, {"alpha\nbeta\ngamma\n.\n", "over half are"}}) {
    SCOPED_TRACE(expected);
    write_file(dir + "/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + words);
    opt.vocab_file = dir + "/vocab.txt";
    try {
      build_text_data(opt, ls, "");
      ADD_FAILURE() << "a corpus of mostly [UNK] was accepted";
    } catch (const mt::core::ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "of the corpus's 2200 tokens are [UNK]")) << e.what();
      EXPECT_TRUE(contains(e.what(), expected)) << e.what();
      EXPECT_TRUE(contains(e.what(), "data.text.vocab_file")) << e.what();
    }
  }
  // Known words for more than half of it: it trains.
  write_file(dir + "/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nalpha\nbeta\ngamma\ndelta\nepsilon\nzeta\n");
  EXPECT_GT(build_text_data(opt, ls, "").unknown_tokens, 0);
}

TEST(TextData, FortunesCorpus) {
  if (!fs::exists("/usr/share/games/fortunes"))
    GTEST_SKIP() << "/usr/share/games/fortunes is absent: apt-get install fortunes to run this test";
  TextDataOptions opt;
  opt.corpus = {"/usr/share/games/fortunes/*"};
  TextLoaderSettings ls;
  ls.batch_size = 32;
  const auto t0 = std::chrono::steady_clock::now();
  const TextData data = build_text_data(opt, ls, "");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(data.vocab_size, 8192);
  EXPECT_GT(data.train->source().size(), 3000);
  EXPECT_TRUE(contains(data.describe_train, " sequences of 128 tokens from "));
  EXPECT_TRUE(contains(data.describe_train, " files (/usr/share/games/fortunes/*)"));
  EXPECT_LT(double(data.unknown_tokens), 0.001 * double(data.corpus_tokens));
  EXPECT_LT(seconds, 20.0);
  std::printf("%s\n%s\n%s: %.2f s\n", data.describe_train.c_str(), data.describe_eval.c_str(),
              data.vocab_source.c_str(), seconds);
}
