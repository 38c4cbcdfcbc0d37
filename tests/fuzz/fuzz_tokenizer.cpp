// Fuzzes the WordPiece tokenizer (data/wordpiece_tokenizer.h): basic tokenization and encoding
// of arbitrary bytes (invalid UTF-8 included) with a fixed vocabulary, decoding the ids back,
// and reading the input itself as a vocab.txt.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/wordpiece_tokenizer.h"
#include "fuzz_input.h"

namespace {

const mt::data::WordPieceTokenizer& tokenizer(bool lowercase) {
  static const std::vector<std::string> vocab = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "the", "play", "##ing", "##s",
      "cafe", "café", "a", "##b", "##c", ",", ".", "!", "\xe4\xb8\xad", "##\xc3\xa9", "x"};
  static const mt::data::WordPieceTokenizer cased(vocab, false, "fuzz vocabulary");
  static const mt::data::WordPieceTokenizer uncased(vocab, true, "fuzz vocabulary");
  return lowercase ? uncased : cased;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool lowercase = data[0] & 1;
  const bool as_vocab_file = data[0] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto& tok = tokenizer(lowercase);

  for (const std::string& word : mt::data::basic_tokenize(text, lowercase)) {
    if (word.empty()) __builtin_trap();  // words are never empty
  }
  const std::vector<int32_t> ids = tok.encode(text);
  for (const int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  }
  (void)tok.decode(ids);
  // Ids from outside the vocabulary must read as "<id?>", not crash.
  std::vector<int32_t> raw;
  for (size_t i = 1; i + 4 <= size && raw.size() < 64; i += 4) {
    int32_t v;
    __builtin_memcpy(&v, data + i, 4);
    raw.push_back(v);
  }
  (void)tok.decode(raw, /*skip_padding=*/false);

  if (as_vocab_file) {
    static mt::fuzz::MemoryFile file;
    try {
      const auto from_file =
          mt::data::WordPieceTokenizer::from_file(file.write(data + 1, size - 1), lowercase);
      (void)from_file.encode("the playing cafe, x!");
    } catch (const mt::core::Error&) {
    }
  }
  return 0;
}
