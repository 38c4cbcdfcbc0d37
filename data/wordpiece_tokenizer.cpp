#include "data/wordpiece_tokenizer.h"

#include <algorithm>
#include <fstream>

#include "core/atomic_write.h"
#include "core/error.h"
#include "data/bert_unicode.h"

namespace mt::data {

namespace text_detail {

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int len;
  char32_t c, min;
  if ((b0 & 0xE0) == 0xC0) len = 2, c = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) len = 3, c = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) len = 4, c = b0 & 0x07, min = 0x10000;
  else {
    ++pos;  // a stray continuation byte or an invalid lead byte
    return 0xFFFD;
  }
  if (pos + len > s.size()) {
    ++pos;
    return 0xFFFD;
  }
  for (int i = 1; i < len; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) {
      ++pos;  // resynchronize at the next byte, which may start a valid sequence
      return 0xFFFD;
    }
    c = (c << 6) | (b & 0x3F);
  }
  // Over-long encodings, UTF-16 surrogates and values past U+10FFFF are invalid UTF-8.
  if (c < min || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
    ++pos;
    return 0xFFFD;
  }
  pos += len;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace text_detail

namespace {

// The reference's last steps on one whitespace-delimited word (uncased already if asked): each
// punctuation character becomes a word of its own, and whitespace ends a word (the reference
// splits on it again after lower-casing; no current character lower-cases to whitespace).
void split_on_punctuation(std::string_view word, const WordSink& sink) {
  size_t start = 0, pos = 0;
  while (pos < word.size()) {
    const size_t at = pos;
    const char32_t c = text_detail::next_code_point(word, pos);
    const bool punctuation = bert_unicode::is_punctuation(c);
    if (punctuation || bert_unicode::is_whitespace(c)) {
      if (at > start) sink(word.substr(start, at - start));
      if (punctuation) sink(word.substr(at, pos - at));
      start = pos;
    }
  }
  if (pos > start) sink(word.substr(start));
}

bool looks_bracketed(const std::string& token) {
  return token.size() >= 3 && token.front() == '[' && token.back() == ']';
}

}  // namespace

void for_each_basic_token(std::string_view text, bool lowercase, const WordSink& sink) {
  using bert_unicode::InputClass;
  std::string word;  // the current whitespace-delimited word, removed characters left out
  bool ascii = true;
  const auto finish_word = [&] {
    if (word.empty()) return;
    if (!lowercase) {
      split_on_punctuation(word, sink);
    } else if (ascii) {  // ASCII has no accents and one lower case: skip ICU
      for (char& ch : word)
        if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch + ('a' - 'A'));
      split_on_punctuation(word, sink);
    } else {
      split_on_punctuation(bert_unicode::lowercase_and_strip_accents(word), sink);
    }
    word.clear();
    ascii = true;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t c = text_detail::next_code_point(text, pos);
    switch (bert_unicode::classify_input(c)) {
      case InputClass::kRemoved:
        break;
      case InputClass::kWhitespace:
        finish_word();
        break;
      case InputClass::kCjkIdeograph:  // a word of its own (uncased: compatibility forms map)
        finish_word();
        word.append(text.substr(start, pos - start));
        ascii = false;
        finish_word();
        break;
      case InputClass::kOther:
        word.append(text.substr(start, pos - start));
        ascii = ascii && c < 0x80;
        break;
    }
  }
  finish_word();
}

bool vocabulary_is_cased(const std::vector<std::string>& tokens) {
  return std::any_of(tokens.begin(), tokens.end(), [](const std::string& t) {
    return !looks_bracketed(t) && std::any_of(t.begin(), t.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  });
}

std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase) {
  std::vector<std::string> words;
  for_each_basic_token(text, lowercase, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> tokens, bool lowercase,
                                       const std::string& origin)
    : tokens_(std::move(tokens)), lowercase_(lowercase) {
  MT_CHECK(!tokens_.empty(), origin, ": the vocabulary is empty");
  MT_CHECK(tokens_.size() < (size_t(1) << 31), origin, ": too many tokens (", tokens_.size(), ")");
  ids_.reserve(tokens_.size());
  special_.assign(tokens_.size(), 0);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    MT_CHECK(!t.empty(), origin, ": token ", i, " (line ", i + 1, ") is empty");
    const auto [it, inserted] = ids_.emplace(t, static_cast<int32_t>(i));
    MT_CHECK(inserted, origin, ": duplicate token \"", t, "\" at lines ", it->second + 1, " and ",
             i + 1, "; ids are line numbers, so every token must appear once");
    special_[i] = looks_bracketed(t);
  }
  const auto require = [&](const char* name) {
    const int32_t id = id_of(name);
    MT_CHECK(id >= 0, origin, ": the vocabulary has no ", name,
             " token; BERT needs [PAD] [UNK] [CLS] [SEP] [MASK]");
    return id;
  };
  pad_id_ = require(kPadToken);
  unk_id_ = require(kUnkToken);
  cls_id_ = require(kClsToken);
  sep_id_ = require(kSepToken);
  mask_id_ = require(kMaskToken);
  // A single-character punctuation token "[" or "]" is not bracketed (size >= 3 above).
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path,
                                                 std::optional<bool> lowercase) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "vocabulary file ", path,
           " cannot be opened; set data.text.vocab_file to a BERT vocab.txt, or leave it empty "
           "to build a vocabulary from the corpus");
  std::vector<std::string> tokens;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    MT_CHECK(!line.empty(), path, ":", line_no,
             ": empty line in the vocabulary (ids are line numbers; remove the line)");
    tokens.push_back(line);
  }
  MT_CHECK(!tokens.empty(), "vocabulary file ", path, " is empty");
  const bool uncased = lowercase.value_or(!vocabulary_is_cased(tokens));
  return WordPieceTokenizer(std::move(tokens), uncased, path);
}

void WordPieceTokenizer::save(const std::string& path) const {
  std::string text;
  for (const std::string& t : tokens_) text += t + '\n';
  core::write_file_atomically(path, text);
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary [0, ",
           vocab_size(), ")");
  return tokens_[id];
}

int32_t WordPieceTokenizer::id_of(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

bool WordPieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

std::vector<int32_t> WordPieceTokenizer::special_ids() const {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < static_cast<int32_t>(special_.size()); ++i)
    if (special_[i]) ids.push_back(i);
  return ids;
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // Character boundaries (byte offsets): pieces must not split a UTF-8 sequence.
  size_t boundaries_buf[kMaxWordChars + 1];
  int chars = 0;
  for (size_t pos = 0; pos < word.size();) {
    if (chars == kMaxWordChars) {  // one more character: too long
      out.push_back(unk_id_);
      return;
    }
    boundaries_buf[chars++] = pos;
    text_detail::next_code_point(word, pos);
  }
  if (chars == 0) return;
  boundaries_buf[chars] = word.size();

  const size_t first_new = out.size();
  std::string piece;
  int start = 0;
  while (start < chars) {
    int32_t found = -1;
    int end = chars;
    for (; end > start; --end) {
      const std::string_view sub =
          word.substr(boundaries_buf[start], boundaries_buf[end] - boundaries_buf[start]);
      if (start == 0) {
        found = id_of(sub);
      } else {
        piece.assign("##");
        piece.append(sub);
        found = id_of(piece);
      }
      if (found >= 0) break;
    }
    if (found < 0) {  // no piece starts here: the whole word is unknown
      out.resize(first_new);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for_each_basic_token(text, lowercase_, [&](std::string_view w) { encode_word(w, ids); });
  return ids;
}

std::string WordPieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_padding) const {
  std::string text;
  for (const int32_t id : ids) {
    if (skip_padding && id == pad_id_) continue;
    if (id < 0 || id >= vocab_size()) {
      text += (text.empty() ? "<" : " <") + std::to_string(id) + "?>";
      continue;
    }
    const std::string& t = tokens_[id];
    if (t.size() > 2 && t[0] == '#' && t[1] == '#') {
      text.append(t, 2, std::string::npos);
    } else {
      if (!text.empty()) text.push_back(' ');
      text += t;
    }
  }
  return text;
}

}  // namespace mt::data
