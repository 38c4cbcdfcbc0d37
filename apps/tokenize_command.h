// `mintrain tokenize`: the ids (and pieces) BERT's tokenizer gives each line of standard input,
// for comparing mintrain with any other tool on the same vocab.txt.
//
//   mintrain tokenize --vocab vocab.txt [--cased | --uncased]
//
// One output line per input line: the ids separated by spaces, a tab, then the pieces separated
// by spaces (no [CLS] / [SEP]). Without --cased / --uncased the case follows the vocabulary, as
// data.text.lowercase does when unset (data/wordpiece_tokenizer.h, vocabulary_is_cased).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace mt::apps {

extern const char* const kTokenizeUsage;

// The subcommand; args exclude "tokenize". Returns the exit status (errors throw core::Error).
int run_tokenize_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out);

}  // namespace mt::apps
