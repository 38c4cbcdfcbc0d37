#include "data/text_corpus.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "core/error.h"
#include "core/strings.h"

namespace mt::data {

namespace fs = std::filesystem;

namespace {

// Binary: a NUL byte in the first 64 KiB (text in any ASCII-compatible encoding has none).
bool looks_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;  // unreadable files fail later, with the reading error
  char buf[65536];
  in.read(buf, sizeof(buf));
  return std::find(buf, buf + in.gcount(), '\0') != buf + in.gcount();
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  // No GLOB_ERR: a missing folder in the pattern is "no match", reported with the advice below.
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  MT_CHECK(rc == 0 || rc == GLOB_NOMATCH || rc == GLOB_ABORTED,
           "data.text.corpus: cannot expand \"", pattern, "\" (glob error ", rc, ")");
  return paths;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "corpus file ", path, " cannot be opened");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MT_CHECK(!in.bad(), "reading corpus file ", path, " failed");
  return text;
}

bool ends_document(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
    line.remove_suffix(1);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  return line.empty() || line == "%";
}

}  // namespace

std::vector<std::string> expand_corpus_files(const std::vector<std::string>& patterns) {
  MT_CHECK(!patterns.empty(),
           "data.text.corpus is empty; list text files or glob patterns, e.g. "
           "\"/usr/share/games/fortunes/*\" (Debian package 'fortunes')");
  std::vector<std::string> candidates;
  for (const std::string& pattern : patterns) {
    for (const std::string& path : glob_paths(pattern)) {
      std::error_code ec;
      if (fs::is_directory(path, ec)) {  // a folder stands for the files directly inside it
        for (const auto& entry : fs::directory_iterator(path, ec))
          if (entry.is_regular_file(ec)) candidates.push_back(entry.path().string());
      } else if (fs::is_regular_file(path, ec)) {
        candidates.push_back(path);
      }
    }
  }
  MT_CHECK(!candidates.empty(), "data.text.corpus: no files match ", core::join(patterns, " "),
           "; install Debian's 'fortunes' package (apt-get install fortunes) for the default "
           "corpus, or set data.text.corpus to your text files");
  std::sort(candidates.begin(), candidates.end());
  std::vector<std::string> files;
  std::set<std::string> seen;  // canonical paths: symlinks and repeated patterns read once
  int64_t binary = 0;
  for (const std::string& path : candidates) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(path, ec);
    if (!seen.insert(ec ? path : canonical.string()).second) continue;
    if (path.ends_with(".dat") || looks_binary(path)) {
      ++binary;
      continue;
    }
    files.push_back(path);
  }
  MT_CHECK(!files.empty(), "data.text.corpus: the ", binary, " files matching ", core::join(patterns, " "),
           " are all binary (*.dat or containing NUL bytes); point it at plain-text files");
  return files;
}

void for_each_document(const std::vector<std::string>& files,
                       const std::function<void(std::string_view)>& document) {
  std::string doc;
  for (const std::string& path : files) {
    const std::string text = read_file(path);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      if (ends_document(line)) {
        if (!doc.empty()) document(doc);
        doc.clear();
      } else {
        if (!doc.empty()) doc.push_back('\n');
        doc.append(line);
      }
    }
    if (!doc.empty()) document(doc);  // a file's end ends its last document
    doc.clear();
  }
}

namespace {

// Fills sequences [CLS] body [SEP] [PAD]... from the token stream (see the header).
class Packer {
 public:
  Packer(const WordPieceTokenizer& tok, int64_t seq_len, std::vector<int32_t>& out)
      : tok_(tok), seq_len_(seq_len), out_(out) {
    current_.reserve(seq_len);
    current_.push_back(tok.cls_id());
  }

  void add_document(const std::vector<int32_t>& ids) {
    if (ids.empty()) return;
    const int64_t size = static_cast<int64_t>(current_.size());
    if (size > 1) {  // a boundary inside the sequence: separate the documents
      if (size == seq_len_ - 2) {
        close();  // the [SEP] would take the last body slot: it ends the sequence instead
      } else {
        current_.push_back(tok_.sep_id());
      }
    }
    for (const int32_t id : ids) {
      current_.push_back(id);
      if (static_cast<int64_t>(current_.size()) == seq_len_ - 1) close();
    }
  }

  void finish() {
    if (current_.size() > 1) close();
  }

 private:
  void close() {
    current_.push_back(tok_.sep_id());
    current_.resize(seq_len_, tok_.pad_id());
    out_.insert(out_.end(), current_.begin(), current_.end());
    current_.clear();
    current_.push_back(tok_.cls_id());
  }

  const WordPieceTokenizer& tok_;
  int64_t seq_len_;
  std::vector<int32_t>& out_;
  std::vector<int32_t> current_;
};

}  // namespace

PackedCorpus pack_corpus(const std::vector<std::string>& files, const WordPieceTokenizer& tokenizer,
                         int64_t seq_len, double eval_fraction) {
  MT_CHECK(seq_len >= 8, "data.text.seq_len must be >= 8 ([CLS], [SEP] and some text), got ",
           seq_len);
  MT_CHECK(eval_fraction >= 0 && eval_fraction < 1, "data.text.eval_fraction must be in [0, 1), got ",
           eval_fraction);
  PackedCorpus corpus;
  corpus.seq_len = seq_len;
  std::vector<int32_t> all;
  Packer packer(tokenizer, seq_len, all);
  std::vector<int32_t> ids;
  for_each_document(files, [&](std::string_view text) {
    ids.clear();
    for_each_basic_token(text, tokenizer.lowercase(),
                         [&](std::string_view w) { tokenizer.encode_word(w, ids); });
    if (ids.empty()) return;
    ++corpus.documents;
    corpus.tokens += static_cast<int64_t>(ids.size());
    corpus.unknown_tokens += std::count(ids.begin(), ids.end(), tokenizer.unk_id());
    packer.add_document(ids);
  });
  packer.finish();
  MT_CHECK(!all.empty(), "the corpus (", files.size(), " files: ", core::join(files, " "),
           ") holds no text; set data.text.corpus to plain-text files");

  const int64_t n = static_cast<int64_t>(all.size()) / seq_len;
  for (int64_t i = 0; i < n; ++i) {
    const bool to_eval = std::floor(double(i + 1) * eval_fraction) > std::floor(double(i) * eval_fraction);
    std::vector<int32_t>& dst = to_eval ? corpus.eval : corpus.train;
    dst.insert(dst.end(), all.begin() + i * seq_len, all.begin() + (i + 1) * seq_len);
  }
  MT_CHECK(corpus.train_sequences() > 0, "the corpus packs into ", n, " sequences of ", seq_len,
           " tokens, none left for training after eval_fraction ", eval_fraction,
           "; add text or lower data.text.eval_fraction");
  MT_CHECK(eval_fraction == 0 || corpus.eval_sequences() > 0, "the corpus packs into only ", n,
           " sequences of ", seq_len, " tokens: too few for eval_fraction ", eval_fraction,
           " to hold out one; add text, shorten data.text.seq_len, or raise eval_fraction");
  return corpus;
}

}  // namespace mt::data
