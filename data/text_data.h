// build_text_data: the token data of a masked-language-model run, from plain options (the
// trainer maps data.text of the config onto TextDataOptions; nothing here knows protobuf).
//
//   type "text"              corpus files -> vocabulary (vocab_file, or built from the corpus
//                            and saved as <output_dir>/vocab.txt) -> packed sequences, split
//                            into train and eval by eval_fraction
//   type "synthetic_tokens"  random ids of synthetic_vocab (ids 0-4 left to the special
//                            tokens), synthetic_sequences for training and
//                            max(1, round(synthetic_sequences * eval_fraction)) for eval
//
// Every rank builds the same data (the vocabulary is a deterministic function of the corpus);
// only rank 0 writes vocab.txt. The eval loader does not shuffle and always masks with epoch
// 0's masks, so evaluation losses are comparable across epochs. eval_fraction 0 means no eval
// loader (TextData::eval is null).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/mlm_loader.h"
#include "data/wordpiece_tokenizer.h"

namespace mt::data {

// Mirrors message TextDataConfig of configs/mintrain.proto (same names and defaults).
struct TextDataOptions {
  std::string type = "text";  // "text" or "synthetic_tokens"
  std::vector<std::string> corpus;  // files or glob patterns
  std::string vocab_file;           // empty = build from the corpus
  int64_t vocab_size = 8192;        // of a built vocabulary (ignored with vocab_file)
  // Unset: from vocab_file (vocabulary_is_cased), true for a built vocabulary.
  std::optional<bool> lowercase;
  int64_t seq_len = 128;
  float mask_prob = 0.15f;
  float eval_fraction = 0.05f;
  int64_t synthetic_sequences = 4096;
  int64_t synthetic_vocab = 30522;
};

// How the loaders deliver the data (from DataConfig and the process's place in the job).
struct TextLoaderSettings {
  int64_t batch_size = 32;
  int64_t eval_batch_size = 0;  // 0 = batch_size
  bool shuffle = true;          // train only; eval is in corpus order
  bool drop_last = false;       // train only
  int prefetch_batches = 2;
  uint64_t seed = 0;  // shuffling, masking, synthetic tokens
  int rank = 0;
  int world_size = 1;
  bool build_train = true;  // false: evaluation only, TextData::train stays null
};

struct TextData {
  std::shared_ptr<WordPieceTokenizer> tokenizer;  // null for synthetic tokens
  std::unique_ptr<MlmLoader> train, eval;         // either may be null (see above)
  std::string describe_train, describe_eval;
  int64_t vocab_size = 0;  // the model's embedding rows
  // "built from the corpus (8192 tokens), saved to runs/x/vocab.txt", "from vocab.txt", ...
  std::string vocab_source;
  int64_t corpus_tokens = 0;    // text tokens in the packed corpus ("text" only)
  int64_t unknown_tokens = 0;   // of those, [UNK]
};

// Throws mt::core::Error naming the problem: unknown type, no corpus files (with how to get
// the default corpus), empty corpus, seq_len < 8, a bad vocabulary file, a batch larger than a
// rank's share with drop_last; a core::ConfigError for a corpus whose tokens are half [UNK] or
// more (nothing, or next to nothing, to predict: the vocabulary does not fit it).
TextData build_text_data(const TextDataOptions& options, const TextLoaderSettings& loader,
                         const std::string& output_dir);

// The data.type values build_text_data accepts.
const std::vector<std::string>& text_data_types();

}  // namespace mt::data
