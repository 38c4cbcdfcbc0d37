// WordPieceTokenizer: text -> token ids the way BERT's tokenizer does it, in two stages.
//
// 1. Basic tokenization (basic_tokenize): UTF-8 is decoded (invalid bytes are dropped, never a
//    crash); control and format characters and U+FFFD are removed; whitespace separates words;
//    every punctuation or symbol character and every CJK ideograph becomes a word of its own;
//    with `lowercase`, letters are lower-cased and accents stripped (café -> cafe).
// 2. WordPiece: each word is split greedily, longest vocabulary match first, left to right; the
//    pieces after the first carry the "##" continuation prefix ("playing" -> play ##ing). A word
//    with no complete segmentation, or longer than 100 characters, becomes [UNK] as a whole.
//
// Unicode coverage is deliberately limited to what a hand-written table can hold (no ICU):
// lower-casing covers ASCII, Latin-1, Latin Extended-A, Greek and basic Cyrillic; accent
// stripping (the effect of NFD decomposition + dropping combining marks) covers the accented
// letters of Latin-1 and Latin Extended-A and removes combining marks U+0300-U+036F. Other
// scripts pass through unchanged: Vietnamese or Greek accents stay, Turkish dotless i stays.
// Punctuation: all non-alphanumeric printable ASCII (as BERT does), Latin-1 punctuation and
// symbols, General Punctuation, currency symbols, Supplemental Punctuation, CJK punctuation and
// the full-width ASCII forms.
//
// The vocabulary file is BERT's vocab.txt: one token per line, id = line number (0-based); it
// must hold [PAD], [UNK], [CLS], [SEP] and [MASK].
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mt::data {

inline constexpr const char* kPadToken = "[PAD]";
inline constexpr const char* kUnkToken = "[UNK]";
inline constexpr const char* kClsToken = "[CLS]";
inline constexpr const char* kSepToken = "[SEP]";
inline constexpr const char* kMaskToken = "[MASK]";
// Words longer than this (in characters) are [UNK] without trying to split them, as in BERT:
// such strings are URLs, base64 or line noise, and splitting them costs quadratic time.
inline constexpr int kMaxWordChars = 100;

// Stage 1 alone: the words of `text` (UTF-8 strings), ready for WordPiece. Also what the
// vocabulary trainer counts.
std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase);

// Calls `word(std::string_view)` for each word instead of building a vector (the hot path of
// the corpus reader). The view is valid only during the call.
template <typename F>
void for_each_basic_token(std::string_view text, bool lowercase, F&& word);

class WordPieceTokenizer {
 public:
  // `tokens[i]` gets id i. Throws if a token is empty, repeated, or a special token is missing;
  // `origin` names the source in those messages (a file path, "built vocabulary").
  WordPieceTokenizer(std::vector<std::string> tokens, bool lowercase,
                     const std::string& origin = "vocabulary");
  // Reads a vocab.txt (trailing "\r" and spaces of a line are ignored; an empty line is an
  // error, since BERT's ids are line numbers and a blank token cannot be matched).
  static WordPieceTokenizer from_file(const std::string& path, bool lowercase);
  // Writes one token per line; from_file(path) reads back the same ids.
  void save(const std::string& path) const;

  // Token ids of `text`, without [CLS] / [SEP].
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the WordPiece ids of one basic-tokenized word to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Readable text for debugging: tokens joined by spaces, "##" pieces glued to the previous
  // one; with skip_padding, [PAD] tokens are left out. Ids outside the vocabulary read "<id?>".
  std::string decode(const std::vector<int32_t>& ids, bool skip_padding = true) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  bool lowercase() const { return lowercase_; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::string& token(int32_t id) const;  // throws for an id outside the vocabulary
  int32_t id_of(std::string_view token) const;  // -1 when absent

  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t mask_id() const { return mask_id_; }
  // Tokens that text never produces and masking must not touch: the five above and every
  // other bracketed token such as BERT's [unused0] (brackets are punctuation, so a word can
  // never be "[x]").
  bool is_special(int32_t id) const;
  std::vector<int32_t> special_ids() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  std::vector<uint8_t> special_;
  bool lowercase_;
  int32_t pad_id_ = -1, unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, mask_id_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Implementation details of for_each_basic_token (a template, so the callback inlines).

namespace text_detail {
// What basic tokenization does with one code point.
enum class CharClass : uint8_t { kDrop, kSpace, kAlone, kWord };
CharClass classify(char32_t c);
// Lower-casing and accent stripping of one code point; 0 = drop it (a combining mark).
char32_t normalize_uncased(char32_t c);
// Decodes the code point at text[pos], advances pos; invalid or truncated sequences advance
// one byte and return U+FFFD (which classify() drops).
char32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t c);
}  // namespace text_detail

template <typename F>
void for_each_basic_token(std::string_view text, bool lowercase, F&& word) {
  using text_detail::CharClass;
  std::string current;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    char32_t c = text_detail::next_code_point(text, pos);
    CharClass cls = text_detail::classify(c);
    if (cls == CharClass::kDrop) continue;
    if (cls == CharClass::kSpace) {
      if (!current.empty()) word(std::string_view(current)), current.clear();
      continue;
    }
    if (cls == CharClass::kAlone) {
      if (!current.empty()) word(std::string_view(current)), current.clear();
      word(text.substr(start, pos - start));
      continue;
    }
    if (lowercase) {
      c = text_detail::normalize_uncased(c);
      if (c == 0) continue;
      text_detail::append_utf8(current, c);
    } else {
      current.append(text.data() + start, pos - start);
    }
  }
  if (!current.empty()) word(std::string_view(current));
}

}  // namespace mt::data
