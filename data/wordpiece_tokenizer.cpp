#include "data/wordpiece_tokenizer.h"

#include <fstream>

#include "core/error.h"

namespace mt::data {

namespace text_detail {

namespace {

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

bool is_whitespace(char32_t c) {
  // \t \n \v \f \r, space, and the Unicode space separators (Zs) plus line/paragraph separators.
  return c == ' ' || in(c, 0x09, 0x0D) || c == 0x00A0 || c == 0x1680 || in(c, 0x2000, 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_removed(char32_t c) {
  // C0/C1 controls (the whitespace ones are handled first), DEL, U+FFFD (what invalid bytes
  // decode to), and the invisible format characters that show up in scraped text: soft hyphen,
  // zero-width space / joiners, direction marks, word joiner, byte-order mark.
  return c < 0x20 || in(c, 0x7F, 0x9F) || c == 0xFFFD || c == 0x00AD || in(c, 0x200B, 0x200F) ||
         in(c, 0x202A, 0x202E) || in(c, 0x2060, 0x2064) || c == 0xFEFF;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)  // every printable ASCII character that is not a letter or digit
    return in(c, 0x21, 0x2F) || in(c, 0x3A, 0x40) || in(c, 0x5B, 0x60) || in(c, 0x7B, 0x7E);
  return in(c, 0x00A1, 0x00BF) || c == 0x00D7 || c == 0x00F7 ||  // Latin-1 punctuation, symbols
         in(c, 0x2010, 0x2027) || in(c, 0x2030, 0x205E) ||      // General Punctuation
         in(c, 0x20A0, 0x20CF) ||                               // currency symbols
         in(c, 0x2E00, 0x2E7F) ||                               // Supplemental Punctuation
         in(c, 0x3001, 0x3003) || in(c, 0x3008, 0x3011) || in(c, 0x3014, 0x301F) ||  // CJK
         in(c, 0xFF01, 0xFF0F) || in(c, 0xFF1A, 0xFF20) || in(c, 0xFF3B, 0xFF40) ||  // full-width
         in(c, 0xFF5B, 0xFF65);
}

bool is_cjk_ideograph(char32_t c) {
  // The CJK Unified Ideographs blocks and their extensions and compatibility forms. Japanese
  // kana and Korean Hangul are written with spaces or are alphabetic, so they are not split.
  return in(c, 0x4E00, 0x9FFF) || in(c, 0x3400, 0x4DBF) || in(c, 0x20000, 0x2A6DF) ||
         in(c, 0x2A700, 0x2CEAF) || in(c, 0xF900, 0xFAFF) || in(c, 0x2F800, 0x2FA1F);
}

// Base letter of each accented letter of Latin-1 (U+00C0-U+00FF) and Latin Extended-A
// (U+0100-U+017F), i.e. what remains of the NFD decomposition without its combining marks;
// '.' = no canonical decomposition (Æ, Ø, Đ, Ł, Œ, ß ... stay as they are).
constexpr std::string_view kLatin1Base =
    "AAAAAA.CEEEEIIII"
    ".NOOOOO..UUUUY.."
    "aaaaaa.ceeeeiiii"
    ".nooooo..uuuuy.y";
constexpr std::string_view kLatinExtABase =
    "AaAaAaCcCcCcCcDd"
    "..EeEeEeEeEeGgGg"
    "GgGgHh..IiIiIiIi"
    "I...JjKk.LlLlLl."
    "...NnNnNn...OoOo"
    "Oo..RrRrRrSsSsSs"
    "SsTtTt..UuUuUuUu"
    "UuUuWwYyYZzZzZz.";

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (in(c, 0x00C0, 0x00DE) && c != 0x00D7) return c + 0x20;
  if (in(c, 0x0100, 0x017F)) {
    // Upper/lower pairs: even/odd in 0100-0137 and 014A-0177, odd/even in 0139-0148 and
    // 0179-017E; a few singles.
    if (c == 0x0130) return 'i';     // İ: lower case is i + combining dot, stripped anyway
    if (c == 0x0178) return 0x00FF;  // Ÿ -> ÿ
    if ((in(c, 0x0100, 0x0137) || in(c, 0x014A, 0x0177)) && c % 2 == 0) return c + 1;
    if ((in(c, 0x0139, 0x0148) || in(c, 0x0179, 0x017E)) && c % 2 == 1) return c + 1;
    return c;
  }
  if (in(c, 0x0391, 0x03A9) && c != 0x03A2) return c + 0x20;  // Greek capitals
  if (in(c, 0x0410, 0x042F)) return c + 0x20;                  // Cyrillic А-Я
  if (in(c, 0x0400, 0x040F)) return c + 0x50;                  // Cyrillic Ѐ-Џ
  return c;
}

}  // namespace

CharClass classify(char32_t c) {
  if (is_whitespace(c)) return CharClass::kSpace;
  if (is_removed(c)) return CharClass::kDrop;
  if (is_punctuation(c) || is_cjk_ideograph(c)) return CharClass::kAlone;
  return CharClass::kWord;
}

char32_t normalize_uncased(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  c = to_lower(c);
  if (in(c, 0x0300, 0x036F)) return 0;  // combining diacritical marks
  if (in(c, 0x00C0, 0x00FF)) {
    const char base = kLatin1Base[c - 0x00C0];
    if (base != '.') return static_cast<char32_t>(base);
  } else if (in(c, 0x0100, 0x017F)) {
    const char base = kLatinExtABase[c - 0x0100];
    if (base != '.') return static_cast<char32_t>(base);
  }
  return c;
}

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
  if (c < min || in(c, 0xD800, 0xDFFF) || c > 0x10FFFF) {
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

std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase) {
  std::vector<std::string> words;
  for_each_basic_token(text, lowercase, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

namespace {
bool looks_bracketed(const std::string& token) {
  return token.size() >= 3 && token.front() == '[' && token.back() == ']';
}
}  // namespace

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

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path, bool lowercase) {
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
  return WordPieceTokenizer(std::move(tokens), lowercase, path);
}

void WordPieceTokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MT_CHECK(out.good(), "cannot write the vocabulary to ", path);
  for (const std::string& t : tokens_) out << t << '\n';
  out.flush();
  MT_CHECK(out.good(), "writing the vocabulary to ", path, " failed (disk full?)");
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
      if (!text.empty()) text.push_back(' ');
      text.push_back('<');
      text += std::to_string(id);
      text += "?>";
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
