// Builds a WordPiece vocabulary from word counts, with BPE-style merges.
//
// The algorithm, deterministic from the counts alone:
//   1. Words are the basic tokenizer's output (data/wordpiece_tokenizer.h); words longer than
//      kMaxWordChars are left out (they become [UNK] anyway).
//   2. The alphabet: every character of the counted words as a word start "c", and as a
//      continuation "##c" where it occurs inside a word (not punctuation, which is always a
//      word of its own), so that any word made of known characters has a segmentation and
//      [UNK] is left to unseen characters. If the alphabet alone would overflow vocab_size, the
//      most frequent forms are kept.
//   3. Every word starts as its characters (c ##c ##c ...). Repeatedly, the adjacent pair of
//      pieces that occurs most often (weighted by word count) is merged into one piece
//      ("t" + "##h" -> "th", "##i" + "##ng" -> "##ing"), and the new piece joins the
//      vocabulary, until it holds vocab_size tokens or no pair occurs min_pair_count times.
//      Ties go to the alphabetically smaller merged string, then to the smaller pair.
//   4. Order: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, the alphabet (sorted by byte string),
//      then the merged pieces in the order they were made.
//
// Merging is BPE's training; the tokenizer then splits words greedily, longest match first
// (WordPiece), which can choose other pieces than the merges did, never fewer known ones.
// Pair counts are updated only for the words that contain the merged pair, and the best pair
// comes from a lazily updated heap, so 8k merges over a few MB of text take about a second.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mt::data {

struct WordPieceTrainerOptions {
  int64_t vocab_size = 8192;  // special tokens included
  bool lowercase = true;      // basic tokenization (must match the tokenizer's)
  int64_t min_pair_count = 2;  // a pair seen less often is not worth a token
};

// Word counts from basic tokenization, fed text piece by piece.
class WordCounter {
 public:
  explicit WordCounter(bool lowercase) : lowercase_(lowercase) {}
  void add_text(std::string_view text);
  const std::map<std::string, int64_t, std::less<>>& counts() const { return counts_; }

 private:
  bool lowercase_;
  std::map<std::string, int64_t, std::less<>> counts_;
};

// The vocabulary (token strings, id = position), special tokens first.
std::vector<std::string> train_wordpiece_vocab(const std::map<std::string, int64_t, std::less<>>& word_counts,
                                               const WordPieceTrainerOptions& options);

}  // namespace mt::data
