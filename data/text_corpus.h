// A plain-text corpus: which files it is made of, its documents, and its token ids packed into
// fixed-length sequences for masked-language-model training.
//
// Files: each corpus entry is a path or a glob(3) pattern. Binary files are skipped by a plain
// rule: names ending in ".dat" (the fortune program's index files next to each text file) and
// files with a NUL byte in their first 64 KiB. Paths that resolve to the same file (the
// fortunes package's "*.u8" symlinks) are read once. The list is sorted, so the corpus does not
// depend on the order glob or the file system returns.
//
// Documents: lines are concatenated; a blank line or a line of only "%" (the fortune
// separator) ends a document.
//
// Packing: the documents' tokens form one stream with [SEP] between documents, cut into
// sequences of seq_len tokens: [CLS] up to seq_len - 2 stream tokens [SEP], then [PAD]s, so
// nothing is wasted on padding except at the end of the corpus. A document boundary that falls
// on a sequence boundary adds no [SEP] of its own, and one that would take the last body slot
// ends the sequence there (one [PAD] follows), so a sequence never holds [SEP] [SEP].
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/wordpiece_tokenizer.h"

namespace mt::data {

// The files of the corpus, sorted; fails naming the patterns when nothing matches.
std::vector<std::string> expand_corpus_files(const std::vector<std::string>& patterns);

// Calls `document(text)` for every non-empty document of the files, in order (lines joined by
// '\n'). Fails naming a file that cannot be read.
void for_each_document(const std::vector<std::string>& files,
                       const std::function<void(std::string_view)>& document);

struct PackedCorpus {
  int64_t seq_len = 0;
  std::vector<int32_t> train;  // train sequences, seq_len ids each, back to back
  std::vector<int32_t> eval;
  int64_t documents = 0;
  int64_t tokens = 0;          // text tokens (no [CLS] / [SEP] / [PAD])
  int64_t unknown_tokens = 0;  // of those, [UNK]

  int64_t train_sequences() const { return seq_len ? int64_t(train.size()) / seq_len : 0; }
  int64_t eval_sequences() const { return seq_len ? int64_t(eval.size()) / seq_len : 0; }
};

// Tokenizes and packs the documents of `files`. Sequence i (in corpus order) goes to eval when
// floor((i + 1) * eval_fraction) > floor(i * eval_fraction): every 1/eval_fraction-th sequence,
// spread evenly through the corpus, floor(n * eval_fraction) in all.
PackedCorpus pack_corpus(const std::vector<std::string>& files, const WordPieceTokenizer& tokenizer,
                         int64_t seq_len, double eval_fraction);

}  // namespace mt::data
