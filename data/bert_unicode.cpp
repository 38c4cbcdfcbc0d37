#include "data/bert_unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace mt::data::bert_unicode {

namespace {

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// tokenization.py's _is_chinese_char: the CJK Unified Ideographs blocks and extensions A-E and
// the compatibility ideographs (kana and Hangul are not in it, so they are not split apart).
bool is_cjk_ideograph(char32_t c) {
  return in(c, 0x4E00, 0x9FFF) || in(c, 0x3400, 0x4DBF) || in(c, 0x20000, 0x2A6DF) ||
         in(c, 0x2A700, 0x2B73F) || in(c, 0x2B740, 0x2B81F) || in(c, 0x2B820, 0x2CEAF) ||
         in(c, 0xF900, 0xFAFF) || in(c, 0x2F800, 0x2FA1F);
}

// tokenization.py's _is_punctuation treats all non-letter/number ASCII as punctuation.
bool is_ascii_punctuation(char32_t c) {
  return in(c, 33, 47) || in(c, 58, 64) || in(c, 91, 96) || in(c, 123, 126);
}

}  // namespace

bool is_whitespace(char32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  if (c < 0x80 && c > 0x1F && c != 0x7F) return false;  // printable ASCII: the common case
  if (u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR) return true;
  const UCharDirection dir = u_charDirection(static_cast<UChar32>(c));
  return dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR || dir == U_SEGMENT_SEPARATOR;
}

InputClass classify_input(char32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return InputClass::kWhitespace;
  if (c < 0x80 && c > 0x1F && c != 0x7F) return InputClass::kOther;
  if (c == 0 || c == 0xFFFD) return InputClass::kRemoved;
  const int8_t type = u_charType(static_cast<UChar32>(c));
  if (type == U_CONTROL_CHAR || type == U_FORMAT_CHAR) return InputClass::kRemoved;
  if (is_whitespace(c)) return InputClass::kWhitespace;
  if (is_cjk_ideograph(c)) return InputClass::kCjkIdeograph;
  return InputClass::kOther;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return is_ascii_punctuation(c);
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
}

std::string lowercase_and_strip_accents(std::string_view word) {
  icu::UnicodeString text = icu::UnicodeString::fromUTF8(
      icu::StringPiece(word.data(), static_cast<int32_t>(word.size())));
  // The root locale: the language-independent full mapping that Python's str.lower() applies
  // (İ -> i + U+0307, final sigma -> ς), without Turkish or Lithuanian rules.
  text.toLower(icu::Locale::getRoot());
  UErrorCode status = U_ZERO_ERROR;
  static const icu::Normalizer2* const nfd = icu::Normalizer2::getNFDInstance(status);
  MT_CHECK(nfd != nullptr && U_SUCCESS(status), "ICU's NFD data cannot be loaded (",
           u_errorName(status), "); reinstall libicu");
  icu::UnicodeString decomposed = nfd->normalize(text, status);
  MT_CHECK(U_SUCCESS(status), "ICU's NFD normalization failed (", u_errorName(status), ")");
  icu::UnicodeString kept;
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    if (u_charType(c) != U_NON_SPACING_MARK) kept.append(c);
    i += U16_LENGTH(c);
  }
  std::string out;
  kept.toUTF8String(out);
  return out;
}

std::string general_category(char32_t c) {
  // Indexed by UCharCategory (uchar.h).
  static constexpr const char* kNames[U_CHAR_CATEGORY_COUNT] = {
      "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Me", "Mc", "Nd", "Nl", "No", "Zs", "Zl", "Zp",
      "Cc", "Cf", "Co", "Cs", "Pd", "Ps", "Pe", "Pc", "Po", "Sm", "Sc", "Sk", "So", "Pi", "Pf"};
  return kNames[u_charType(static_cast<UChar32>(c))];
}

std::string unicode_version() {
  UVersionInfo version;
  u_getUnicodeVersion(version);
  char text[U_MAX_VERSION_STRING_LENGTH];
  u_versionToString(version, text);
  return text;
}

}  // namespace mt::data::bert_unicode
