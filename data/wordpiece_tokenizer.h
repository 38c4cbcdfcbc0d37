// WordPieceTokenizer: text -> token ids exactly as BERT's reference tokenizer (Google's
// tokenization.py, FullTokenizer) produces them, in two stages.
//
// 1. Basic tokenization (basic_tokenize), the reference's steps in its order: UTF-8 is decoded
//    (invalid bytes are dropped, as the reference's errors="ignore" does); U+0000, U+FFFD and
//    control and format characters are removed; CJK ideographs become words of their own;
//    whitespace separates words; with `lowercase` (uncased vocabularies) each word is
//    lower-cased as Python's str.lower() does, decomposed (NFD) and stripped of its combining
//    marks; then every punctuation character becomes a word of its own. The character data come
//    from ICU (data/bert_unicode.h lists the exact rules).
// 2. WordPiece: each word is split greedily, longest vocabulary match first, left to right; the
//    pieces after the first carry the "##" continuation prefix ("playing" -> play ##ing). A word
//    with no complete segmentation, or longer than 100 characters, becomes [UNK] as a whole.
//
// Special-token strings in the text are text: "[MASK]" is "[", "mask", "]" (uncased), never the
// [MASK] id, as in Google's tokenization.py (HuggingFace's tokenizers match them as added tokens).
// data/README.md lists where the HuggingFace implementations differ and which behaviour this is.
//
// The vocabulary file is BERT's vocab.txt: one token per line, id = line number (0-based); it
// must hold [PAD], [UNK], [CLS], [SEP] and [MASK].
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
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

// Calls `word` for each word instead of building a vector (the hot path of the corpus reader).
// The view is valid only during the call. The callers' lambdas capture a reference or two, which
// std::function keeps without allocating.
using WordSink = std::function<void(std::string_view)>;
void for_each_basic_token(std::string_view text, bool lowercase, const WordSink& word);

// Whether a vocabulary is for cased text: a token other than the bracketed special ones holds an
// ASCII capital letter (uncased vocabularies are built from lower-cased text and have none).
bool vocabulary_is_cased(const std::vector<std::string>& tokens);

class WordPieceTokenizer {
 public:
  // `tokens[i]` gets id i. Throws if a token is empty, repeated, or a special token is missing;
  // `origin` names the source in those messages (a file path, "built vocabulary").
  WordPieceTokenizer(std::vector<std::string> tokens, bool lowercase,
                     const std::string& origin = "vocabulary");
  // Reads a vocab.txt (trailing "\r" and spaces of a line are ignored; an empty line is an
  // error, since BERT's ids are line numbers and a blank token cannot be matched). Without
  // `lowercase`, the case follows the vocabulary (vocabulary_is_cased).
  static WordPieceTokenizer from_file(const std::string& path,
                                      std::optional<bool> lowercase = std::nullopt);
  // Writes one token per line, replacing the file atomically; from_file(path) reads back the
  // same ids.
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
// UTF-8 helpers shared with the vocabulary trainer.

namespace text_detail {
// Decodes the code point at text[pos], advances pos; invalid or truncated sequences advance
// one byte and return U+FFFD (which basic tokenization removes).
char32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t c);
}  // namespace text_detail

}  // namespace mt::data
