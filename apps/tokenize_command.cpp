#include "apps/tokenize_command.h"

#include <istream>
#include <optional>
#include <ostream>

#include "apps/flags.h"
#include "core/error.h"
#include "core/strings.h"
#include "data/wordpiece_tokenizer.h"

namespace mt::apps {

const char* const kTokenizeUsage =
    "usage: mintrain tokenize --vocab vocab.txt [--cased | --uncased] < text\n"
    "  prints, for each line of standard input, its BERT token ids, a tab and the pieces\n"
    "  (no [CLS] / [SEP]); --uncased lower-cases and strips accents (do_lower_case), --cased\n"
    "  does not; by default the case follows the vocabulary (cased when a token other than\n"
    "  the [...] ones has a capital A-Z)";

int run_tokenize_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  std::string vocab;
  std::optional<bool> lowercase;
  Flags f("tokenize", args, kTokenizeUsage);
  while (f.next()) {
    if (f.is("--vocab")) {
      vocab = f.value();
    } else if (f.is("--cased") || f.is("--uncased")) {
      f.no_value();
      if (lowercase && *lowercase != f.is("--uncased")) f.fail("--cased and --uncased contradict each other");
      lowercase = f.is("--uncased");
    } else if (f.is("--help") || f.is("-h")) {
      out << kTokenizeUsage << "\n";
      return 0;
    } else {
      f.fail("unexpected argument \"" + f.arg() + "\"");
    }
  }
  MT_CHECK(!vocab.empty(), "tokenize: missing --vocab vocab.txt\n", kTokenizeUsage);
  const data::WordPieceTokenizer tokenizer = data::WordPieceTokenizer::from_file(vocab, lowercase);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> ids, pieces;
    for (const int32_t id : tokenizer.encode(line)) {
      ids.push_back(std::to_string(id));
      pieces.push_back(tokenizer.token(id));
    }
    out << core::join(ids, " ") << '\t' << core::join(pieces, " ") << '\n';
  }
  out.flush();
  MT_CHECK(out.good(), "tokenize: writing the output failed");
  return 0;
}

}  // namespace mt::apps
