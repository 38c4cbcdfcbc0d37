#include "data/wordpiece_trainer.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "data/wordpiece_tokenizer.h"

namespace mt::data {

void WordCounter::add_text(std::string_view text) {
  for_each_basic_token(text, lowercase_, [&](std::string_view word) {
    auto it = counts_.find(word);
    if (it == counts_.end()) it = counts_.emplace(std::string(word), 0).first;
    ++it->second;
  });
}

namespace {

using PairKey = uint64_t;  // (left piece id << 32) | right piece id
PairKey pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t left_of(PairKey k) { return int32_t(k >> 32); }
int32_t right_of(PairKey k) { return int32_t(k & 0xFFFFFFFFu); }

struct Candidate {
  int64_t count;
  std::string merged;
  PairKey key;
};
// The priority queue's top is the "largest": most frequent, then smallest string, then pair.
struct CandidateOrder {
  bool operator()(const Candidate& x, const Candidate& y) const {
    return std::tie(x.count, y.merged, y.key) < std::tie(y.count, x.merged, x.key);
  }
};

// The characters (as UTF-8 strings) of a word.
std::vector<std::string> characters(std::string_view word) {
  std::vector<std::string> chars;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    text_detail::next_code_point(word, pos);
    chars.emplace_back(word.substr(start, pos - start));
  }
  return chars;
}

class MergeTrainer {
 public:
  MergeTrainer(const std::map<std::string, int64_t, std::less<>>& word_counts,
               const WordPieceTrainerOptions& opt)
      : opt_(opt) {
    vocab_ = {kPadToken, kUnkToken, kClsToken, kSepToken, kMaskToken};
    for (const std::string& s : vocab_) in_vocab_.emplace(s, true);
    build_alphabet(word_counts);
    for (const auto& [key, count] : pair_count_) push(key, count);
  }

  std::vector<std::string> run() {
    const size_t target = static_cast<size_t>(opt_.vocab_size);
    while (vocab_.size() < target && !heap_.empty()) {
      Candidate best = heap_.top();
      heap_.pop();
      const auto it = pair_count_.find(best.key);
      if (it == pair_count_.end() || it->second != best.count) continue;  // stale entry
      if (best.count < opt_.min_pair_count) break;  // the best is too rare: so are the rest
      merge(best.key, best.merged);
    }
    return std::move(vocab_);
  }

 private:
  int32_t piece_id(const std::string& s) {
    const auto [it, inserted] = piece_ids_.emplace(s, static_cast<int32_t>(pieces_.size()));
    if (inserted) pieces_.push_back(s);
    return it->second;
  }

  void add_to_vocab(const std::string& s) {
    if (in_vocab_.emplace(s, true).second) vocab_.push_back(s);
  }

  void build_alphabet(const std::map<std::string, int64_t, std::less<>>& word_counts) {
    // Character frequencies by form ("c" starts a word, "##c" continues one), then the
    // alphabet: the most frequent forms if it must be cut.
    std::map<std::string, int64_t> form_count;
    std::vector<std::pair<std::vector<std::string>, int64_t>> split_words;
    for (const auto& [word, count] : word_counts) {
      if (count <= 0 || word.empty()) continue;
      std::vector<std::string> chars = characters(word);
      if (static_cast<int>(chars.size()) > kMaxWordChars) continue;
      for (size_t i = 0; i < chars.size(); ++i) {
        // Every character gets its start form (count 0 if only seen inside words), so a new
        // word starting with it is not [UNK]; the continuation form only where the corpus has
        // one (punctuation is always a word of its own: "##!" would never be used).
        form_count[chars[i]] += i == 0 ? count : 0;
        if (i > 0) form_count["##" + chars[i]] += count;
      }
      split_words.emplace_back(std::move(chars), count);
    }
    std::vector<std::pair<std::string, int64_t>> alphabet(form_count.begin(), form_count.end());
    const size_t room = static_cast<size_t>(std::max<int64_t>(0, opt_.vocab_size - 5));
    if (alphabet.size() > room) {
      std::stable_sort(alphabet.begin(), alphabet.end(),
                       [](const auto& x, const auto& y) { return x.second > y.second; });
      alphabet.resize(room);
    }
    std::sort(alphabet.begin(), alphabet.end());  // by form again (forms are unique)
    for (const auto& [form, count] : alphabet) add_to_vocab(form);

    // Words as piece ids; words with a character cut from the alphabet take no part.
    for (auto& [chars, count] : split_words) {
      std::vector<int32_t> pieces;
      bool known = true;
      for (size_t i = 0; i < chars.size() && known; ++i) {
        const std::string piece = i == 0 ? chars[i] : "##" + chars[i];
        known = in_vocab_.count(piece) > 0;
        if (known) pieces.push_back(piece_id(piece));
      }
      if (!known) continue;
      const int32_t w = static_cast<int32_t>(words_.size());
      for (size_t i = 0; i + 1 < pieces.size(); ++i) {
        const PairKey k = pair_key(pieces[i], pieces[i + 1]);
        pair_count_[k] += count;
        where_[k].push_back(w);
      }
      words_.push_back(std::move(pieces));
      word_count_.push_back(count);
    }
    seen_in_merge_.assign(words_.size(), -1);
  }

  std::string merged_string(PairKey k) const {
    const std::string& right = pieces_[right_of(k)];
    return pieces_[left_of(k)] + right.substr(2);  // a right piece always starts with "##"
  }

  void push(PairKey k, int64_t count) { heap_.push({count, merged_string(k), k}); }

  void merge(PairKey key, const std::string& merged) {
    const int32_t a = left_of(key), b = right_of(key);
    const int32_t c = piece_id(merged);
    add_to_vocab(merged);
    ++merges_;
    std::unordered_map<PairKey, int64_t> delta;
    std::vector<int32_t> occurrences = std::move(where_[key]);
    where_.erase(key);
    for (const int32_t w : occurrences) {
      if (seen_in_merge_[w] == merges_) continue;  // a word is listed once per occurrence
      seen_in_merge_[w] = merges_;
      std::vector<int32_t>& pieces = words_[w];
      const int64_t count = word_count_[w];
      std::vector<int32_t> merged_pieces;
      merged_pieces.reserve(pieces.size());
      bool changed = false;
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (i + 1 < pieces.size() && pieces[i] == a && pieces[i + 1] == b) {
          merged_pieces.push_back(c);
          ++i;
          changed = true;
        } else {
          merged_pieces.push_back(pieces[i]);
        }
      }
      if (!changed) continue;  // an entry left over from before an earlier merge
      // Re-count this word's pairs: simpler than patching neighbours, and words are short.
      for (size_t i = 0; i + 1 < pieces.size(); ++i) delta[pair_key(pieces[i], pieces[i + 1])] -= count;
      for (size_t i = 0; i + 1 < merged_pieces.size(); ++i) {
        const PairKey k = pair_key(merged_pieces[i], merged_pieces[i + 1]);
        delta[k] += count;
        if (merged_pieces[i] == c || merged_pieces[i + 1] == c) where_[k].push_back(w);
      }
      pieces = std::move(merged_pieces);
    }
    // Apply in key order so the heap sees the same pushes on every run.
    std::vector<std::pair<PairKey, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [k, d] : changes) {
      if (d == 0) continue;
      int64_t& total = pair_count_[k];
      total += d;
      MT_CHECK(total >= 0, "WordPiece trainer: negative pair count (internal error)");
      if (total == 0) {
        pair_count_.erase(k);
      } else {
        push(k, total);
      }
    }
  }

  WordPieceTrainerOptions opt_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, bool> in_vocab_;
  std::vector<std::string> pieces_;  // piece id -> string (alphabet and merged pieces)
  std::unordered_map<std::string, int32_t> piece_ids_;
  std::vector<std::vector<int32_t>> words_;  // each word as piece ids
  std::vector<int64_t> word_count_;
  std::unordered_map<PairKey, int64_t> pair_count_;
  std::unordered_map<PairKey, std::vector<int32_t>> where_;  // words that may hold the pair
  std::vector<int64_t> seen_in_merge_;
  int64_t merges_ = 0;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> heap_;
};

}  // namespace

std::vector<std::string> train_wordpiece_vocab(const std::map<std::string, int64_t, std::less<>>& word_counts,
                                               const WordPieceTrainerOptions& options) {
  MT_CHECK(options.vocab_size >= 7, "WordPiece trainer: vocab_size ", options.vocab_size,
           " is too small; it needs the 5 special tokens plus at least one character");
  MT_CHECK(options.min_pair_count >= 1, "WordPiece trainer: min_pair_count must be >= 1");
  MT_CHECK(!word_counts.empty(), "WordPiece trainer: the corpus has no words");
  return MergeTrainer(word_counts, options).run();
}

}  // namespace mt::data
