// The Unicode character properties of BERT's basic tokenizer (Google's tokenization.py), from
// ICU's tables (Debian's libicu): nothing here is a hand-typed range except the reference's own
// ASCII punctuation and CJK ideograph ranges.
//
//   removed      U+0000, U+FFFD and every control (Cc) or format (Cf) character other than
//                \t \n \r: soft hyphen, zero-width joiners, bidirectional marks and isolates,
//                byte-order mark, vertical tab, form feed ...
//   whitespace   what Python's str.split() splits on (category Zs, or bidirectional class
//                WS, B or S), which includes the reference's _is_whitespace (\t \n \r, space,
//                Zs) and also the line and paragraph separators U+2028 / U+2029
//   CJK          the reference's _is_chinese_char ranges: each ideograph is a word of its own
//   punctuation  every P* category plus ASCII 33-47, 58-64, 91-96, 123-126 ($ + < = > ^ ` | ~
//                included); other symbols (currency, degree, superscripts, ×) stay in words
//   uncased      Python's str.lower() (full lower-case mapping, final sigma in context), then
//                NFD, then every non-spacing mark (Mn) dropped: "Việt" -> "viet", "İ" -> "i",
//                Hangul syllables -> conjoining jamo
//
// Private-use (Co) and unassigned (Cn) code points are letters like any other, as in Google's
// tokenization.py (HuggingFace's tokenizers remove them); see data/README.md.
#pragma once
#include <string>
#include <string_view>

namespace mt::data::bert_unicode {

// What the first pass of basic tokenization does with a code point of the input.
enum class InputClass : unsigned char { kRemoved, kWhitespace, kCjkIdeograph, kOther };
InputClass classify_input(char32_t c);

// Punctuation as the reference splits it (after lower-casing, in the uncased path).
bool is_punctuation(char32_t c);
// Python's str.isspace(): where the reference's final whitespace split cuts a word.
bool is_whitespace(char32_t c);

// The uncased form of one whitespace-delimited word (UTF-8, valid): str.lower(), NFD, marks
// (Mn) removed. The word is the context of final sigma, as in the reference.
std::string lowercase_and_strip_accents(std::string_view word);

// The two-letter general category ("Lu", "Mn", "Co", ...), as Python's unicodedata.category.
std::string general_category(char32_t c);

// The Unicode version of the tables (ICU's), for messages and the tests.
std::string unicode_version();

}  // namespace mt::data::bert_unicode
