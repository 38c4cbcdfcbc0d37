#include "data/text_data.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/strings.h"
#include "data/text_corpus.h"
#include "data/wordpiece_trainer.h"

namespace mt::data {

namespace fs = std::filesystem;

namespace {

MlmLoaderOptions train_options(const TextLoaderSettings& s, int32_t pad_id) {
  MlmLoaderOptions o;
  o.batch_size = s.batch_size;
  o.shuffle = s.shuffle;
  o.drop_last = s.drop_last;
  o.seed = s.seed;
  o.rank = s.rank;
  o.world_size = s.world_size;
  o.prefetch_batches = s.prefetch_batches;
  o.pad_id = pad_id;
  return o;
}

MlmLoaderOptions eval_options(const TextLoaderSettings& s, int32_t pad_id) {
  MlmLoaderOptions o = train_options(s, pad_id);
  o.batch_size = s.eval_batch_size > 0 ? s.eval_batch_size : s.batch_size;
  o.shuffle = false;
  o.drop_last = false;
  o.fixed_mask_epoch = 0;
  return o;
}

void build_loaders(TextData& data, std::shared_ptr<const TokenSource> train,
                   std::shared_ptr<const TokenSource> eval, std::shared_ptr<const MlmMasker> masker,
                   const TextLoaderSettings& s, int32_t pad_id) {
  if (train) data.describe_train = train->describe();
  if (eval) data.describe_eval = eval->describe();
  if (s.build_train && train)
    data.train = std::make_unique<MlmLoader>(train, masker, train_options(s, pad_id));
  if (eval) data.eval = std::make_unique<MlmLoader>(eval, masker, eval_options(s, pad_id));
}

TextData build_synthetic(const TextDataOptions& opt, const TextLoaderSettings& s) {
  MT_CHECK(opt.eval_fraction >= 0 && opt.eval_fraction < 1,
           "data.text.eval_fraction must be in [0, 1), got ", opt.eval_fraction);
  TextData data;
  data.vocab_size = opt.synthetic_vocab;
  data.vocab_source = "synthetic ids 5.." + std::to_string(opt.synthetic_vocab - 1) +
                      " (0-4: [PAD] [UNK] [CLS] [SEP] [MASK])";
  constexpr int32_t kFirstId = 5;
  auto train = std::make_shared<SyntheticTokenSource>(opt.synthetic_sequences, opt.seq_len,
                                                      opt.synthetic_vocab, s.seed, 0, kFirstId);
  std::shared_ptr<SyntheticTokenSource> eval;
  if (opt.eval_fraction > 0) {
    const int64_t n = std::max<int64_t>(1, std::llround(opt.synthetic_sequences * double(opt.eval_fraction)));
    eval = std::make_shared<SyntheticTokenSource>(n, opt.seq_len, opt.synthetic_vocab, s.seed, 1, kFirstId);
  }
  MlmMaskingOptions mo;
  mo.mask_prob = opt.mask_prob;
  mo.vocab_size = opt.synthetic_vocab;
  mo.mask_id = 4;
  mo.special_ids = {0, 1, 2, 3, 4};
  build_loaders(data, train, eval, std::make_shared<const MlmMasker>(mo), s, /*pad_id=*/0);
  return data;
}

// [UNK] is never predicted (data/mlm_masking.h): a corpus of mostly [UNK] leaves next to nothing
// to learn (or nothing: a NaN loss, an evaluation of no examples). It means the vocabulary does
// not fit the corpus, which a rerun finds the same: a ConfigError.
void check_vocabulary_covers(const PackedCorpus& corpus, const TextDataOptions& opt, const std::string& vocab) {
  const int64_t known = corpus.tokens - corpus.unknown_tokens;
  if (known * 2 > corpus.tokens) return;
  throw core::ConfigError(core::detail::concat(
      core::formatted("%.1f%%", 100.0 * corpus.unknown_tokens / std::max<int64_t>(1, corpus.tokens)),
      " of the corpus's ", corpus.tokens, " tokens are [UNK] (vocabulary ", vocab,
      "), which the model is never taught to predict: ", known == 0 ? "no token is left to mask" : "over half are",
      ". The vocabulary does not fit the corpus (data.text.corpus ", core::join(opt.corpus, ", "), "): give a ",
      "data.text.vocab_file of its language and case (data.text.lowercase), or leave vocab_file empty to build ",
      "one from the corpus"));
}

TextData build_text(const TextDataOptions& opt, const TextLoaderSettings& s,
                    const std::string& output_dir) {
  MT_CHECK(opt.seq_len >= 8, "data.text.seq_len must be >= 8 ([CLS], [SEP] and some text), got ",
           opt.seq_len);
  MT_CHECK(opt.eval_fraction >= 0 && opt.eval_fraction < 1,
           "data.text.eval_fraction must be in [0, 1), got ", opt.eval_fraction);
  const std::vector<std::string> files = expand_corpus_files(opt.corpus);
  TextData data;
  if (!opt.vocab_file.empty()) {
    data.tokenizer = std::make_shared<WordPieceTokenizer>(
        WordPieceTokenizer::from_file(opt.vocab_file, opt.lowercase));
    data.vocab_source = "from " + opt.vocab_file +
                        (data.tokenizer->lowercase() ? " (uncased)" : " (cased)");
  } else {
    const bool lowercase = opt.lowercase.value_or(true);
    WordCounter counter(lowercase);
    for_each_document(files, [&](std::string_view doc) { counter.add_text(doc); });
    MT_CHECK(!counter.counts().empty(), "the corpus (", files.size(), " files matching ",
             core::join(opt.corpus, " "), ") holds no words; set data.text.corpus to plain-text files");
    WordPieceTrainerOptions to;
    to.vocab_size = opt.vocab_size;
    to.lowercase = lowercase;
    data.tokenizer = std::make_shared<WordPieceTokenizer>(
        train_wordpiece_vocab(counter.counts(), to), lowercase, "built vocabulary");
    data.vocab_source = "built from the corpus (" + std::to_string(data.tokenizer->vocab_size()) + " tokens)";
    if (!output_dir.empty()) {
      const std::string path = (fs::path(output_dir) / "vocab.txt").string();
      // Another process may read vocab.txt while rank 0 writes it (a second run on the same
      // output folder): save() replaces the file atomically.
      if (s.rank == 0) {
        std::error_code ec;
        fs::create_directories(output_dir, ec);
        MT_CHECK(!ec, "cannot create the output folder ", output_dir, ": ", ec.message());
        data.tokenizer->save(path);
      }
      data.vocab_source += ", saved to " + path;
    }
  }
  data.vocab_size = data.tokenizer->vocab_size();

  PackedCorpus corpus = pack_corpus(files, *data.tokenizer, opt.seq_len, opt.eval_fraction);
  data.corpus_tokens = corpus.tokens;
  data.unknown_tokens = corpus.unknown_tokens;
  check_vocabulary_covers(corpus, opt, data.vocab_source);
  const std::string origin = " tokens from " + std::to_string(files.size()) + " files (" +
                             core::join(opt.corpus, ", ") + ")";
  const auto describe = [&](const char* name, int64_t n) {
    return std::string(name) + ": " + std::to_string(n) + " sequences of " +
           std::to_string(opt.seq_len) + origin;
  };
  const int64_t n_train = corpus.train_sequences(), n_eval = corpus.eval_sequences();
  auto train = std::make_shared<PackedTokenSource>(std::move(corpus.train), opt.seq_len,
                                                   describe("text corpus", n_train));
  std::shared_ptr<PackedTokenSource> eval;
  if (n_eval > 0)
    eval = std::make_shared<PackedTokenSource>(std::move(corpus.eval), opt.seq_len,
                                               describe("text corpus (eval)", n_eval));
  MlmMaskingOptions mo;
  mo.mask_prob = opt.mask_prob;
  mo.vocab_size = data.vocab_size;
  mo.mask_id = data.tokenizer->mask_id();
  mo.special_ids = data.tokenizer->special_ids();
  build_loaders(data, train, eval, std::make_shared<const MlmMasker>(mo), s,
                data.tokenizer->pad_id());
  return data;
}

}  // namespace

const std::vector<std::string>& text_data_types() {
  static const std::vector<std::string> types = {"text", "synthetic_tokens"};
  return types;
}

TextData build_text_data(const TextDataOptions& options, const TextLoaderSettings& loader,
                         const std::string& output_dir) {
  if (options.type == "text") return build_text(options, loader, output_dir);
  if (options.type == "synthetic_tokens") return build_synthetic(options, loader);
  MT_FAIL("data.type \"", options.type, "\" is not a token dataset; valid: ",
          core::join(text_data_types(), ", "));
}

}  // namespace mt::data
