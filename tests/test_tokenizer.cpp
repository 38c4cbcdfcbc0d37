// WordPiece tokenization (data/wordpiece_tokenizer.h) and vocabulary building
// (data/wordpiece_trainer.h): basic tokenization of tricky text (punctuation, accents, CJK,
// control characters, invalid UTF-8), greedy longest-match WordPiece with [UNK], vocab.txt
// reading and its errors, and the trainer's exact merge order, determinism and coverage.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_helpers.h"
#include "core/error.h"
#include "core/random.h"
#include "data/text_corpus.h"
#include "data/wordpiece_tokenizer.h"
#include "data/wordpiece_trainer.h"

using namespace mt::data;
using mt::core::Error;

namespace {

namespace fs = std::filesystem;
using Words = std::vector<std::string>;

std::string make_temp_dir() { return mt::testing::make_temp_dir("mt_tok"); }

using mt::testing::error_of;
using mt::testing::contains;

using mt::testing::write_file;

// A small hand-made vocabulary; ids are positions.
std::vector<std::string> small_vocab() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]",
          "un", "##aff", "##able", "play", "##ing", "##s", "the", "cafe", "café",
          ",", ".", "!", "'", "hello", "world", "中", "国", "x", "##x", "a", "##a", "##b"};
}

WordPieceTokenizer small_tokenizer(bool lowercase = true) {
  return WordPieceTokenizer(small_vocab(), lowercase, "test vocabulary");
}

Words tokens_of(const WordPieceTokenizer& tok, std::string_view text) {
  Words out;
  for (const int32_t id : tok.encode(text)) out.push_back(tok.token(id));
  return out;
}

bool valid_utf8(const std::string& s) {
  size_t pos = 0;
  while (pos < s.size())
    if (text_detail::next_code_point(s, pos) == 0xFFFD) return false;
  return true;
}

}  // namespace

TEST(BasicTokenize, SplitsPunctuationFromWords) {
  EXPECT_EQ(basic_tokenize("Hello, world!", true), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(basic_tokenize("don't", true), (Words{"don", "'", "t"}));
  EXPECT_EQ(basic_tokenize("$3.50 (approx.)", true), (Words{"$", "3", ".", "50", "(", "approx", ".", ")"}));
  EXPECT_EQ(basic_tokenize("a--b...", false), (Words{"a", "-", "-", "b", ".", ".", "."}));
  // Unicode punctuation: curly quotes, em dash, ellipsis, inverted question mark, guillemets.
  EXPECT_EQ(basic_tokenize("\u201Chi\u201D\u2014ok\u2026 \u00BFs\u00ED? \u00ABx\u00BB", true),
            (Words{"\u201C", "hi", "\u201D", "\u2014", "ok", "\u2026", "\u00BF", "si", "?", "\u00AB",
                   "x", "\u00BB"}));
}

TEST(BasicTokenize, CleansWhitespaceAndControlCharacters) {
  EXPECT_EQ(basic_tokenize("  a\t\tb\n\r\nc  \f d\v", true), (Words{"a", "b", "c", "d"}));
  // Controls, DEL, soft hyphen, zero-width space and BOM vanish without splitting the word;
  // "_\bA" is how fortunes' overstriking looks: the backspace goes.
  EXPECT_EQ(basic_tokenize("ab\x01\x7f" "cd \u00ADso\u200Bft\uFEFF", true), (Words{"abcd", "soft"}));
  EXPECT_EQ(basic_tokenize("x\b_y", true), (Words{"x", "_", "y"}));
  // No-break and ideographic spaces separate words.
  EXPECT_EQ(basic_tokenize("a\u00A0b\u3000c", true), (Words{"a", "b", "c"}));
  EXPECT_TRUE(basic_tokenize("", true).empty());
  EXPECT_TRUE(basic_tokenize("\n\n   \n", true).empty());
}

TEST(BasicTokenize, LowercasesAndStripsAccentsOnlyWhenUncased) {
  EXPECT_EQ(basic_tokenize("Café", true), (Words{"cafe"}));
  EXPECT_EQ(basic_tokenize("Café", false), (Words{"Café"}));
  EXPECT_EQ(basic_tokenize("ÉLAN naïve Ångström Łódź ŒUVRE Straße", true),
            (Words{"elan", "naive", "angstrom", "łodz", "œuvre", "straße"}));
  // Already decomposed: e + U+0301 combining acute.
  EXPECT_EQ(basic_tokenize("cafe\u0301", true), (Words{"cafe"}));
  EXPECT_EQ(basic_tokenize("ΑΒΓ МОСКВА", true), (Words{"αβγ", "москва"}));
}

// The reference's behaviours beyond Latin-1 (tests/test_bert_tokenizer_golden.cpp checks every
// code point against the reference itself; these name the cases data/README.md describes).
TEST(BasicTokenize, FollowsTheReferenceOnEveryScript) {
  // NFD + marks removed: Vietnamese, Greek tonos, Hangul syllables become conjoining jamo.
  EXPECT_EQ(basic_tokenize("Tiếng Việt Άλφα", true), (Words{"tieng", "viet", "αλφα"}));
  EXPECT_EQ(basic_tokenize("\uD55C", true), (Words{"\u1112\u1161\u11AB"}));
  EXPECT_EQ(basic_tokenize("\uD55C", false), (Words{"\uD55C"}));
  // Full lower-casing as Python's str.lower(): Armenian, capital sharp s, dotted I, final sigma.
  EXPECT_EQ(basic_tokenize("ՀԱՅ ẞ İ ΟΔΟΣ. ΣΑ", true), (Words{"հայ", "ß", "i", "οδος", ".", "σα"}));
  // Unicode punctuation (Devanagari danda, Arabic comma) splits; symbols stay in the word.
  EXPECT_EQ(basic_tokenize("नमस्ते। a،b 5€ 25°C x² 3×4", false),
            (Words{"नमस्ते", "।", "a", "،", "b", "5€", "25°C", "x²", "3×4"}));
  // Vertical tab, form feed and bidi isolates are removed (control / format), not separators;
  // the line separator splits (Python's str.split() does).
  EXPECT_EQ(basic_tokenize("a\vb\fc \u2066d\u2069e f\u2028g", false), (Words{"abc", "de", "f", "g"}));
  // Private use stays a letter (Google keeps it; HuggingFace removes it).
  EXPECT_EQ(basic_tokenize("a\uE000b", true), (Words{"a\uE000b"}));
  // A literal special token is text.
  EXPECT_EQ(basic_tokenize("[MASK]", true), (Words{"[", "mask", "]"}));
  EXPECT_EQ(basic_tokenize("[MASK]", false), (Words{"[", "MASK", "]"}));
}

TEST(BasicTokenize, CjkIdeographsAreSeparateWords) {
  EXPECT_EQ(basic_tokenize("我爱中国abc", true), (Words{"我", "爱", "中", "国", "abc"}));
  EXPECT_EQ(basic_tokenize("中文。", true), (Words{"中", "文", "。"}));
  // Kana are not ideographs: a katakana word stays whole.
  EXPECT_EQ(basic_tokenize("カタカナ", true), (Words{"カタカナ"}));
}

TEST(BasicTokenize, InvalidUtf8IsDroppedNeverFatal) {
  EXPECT_EQ(basic_tokenize("ab\xff" "cd", true), (Words{"abcd"}));
  EXPECT_EQ(basic_tokenize("\xc3(", true), (Words{"("}));         // lead byte without continuation
  EXPECT_EQ(basic_tokenize("ok \xe2\x82", true), (Words{"ok"}));   // truncated at the end
  EXPECT_EQ(basic_tokenize("\xc0\xaf" "x", true), (Words{"x"}));   // over-long "/"
  EXPECT_EQ(basic_tokenize("\xed\xa0\x80y", true), (Words{"y"}));  // UTF-16 surrogate
  // Random bytes: no crash, and every word that comes out is valid UTF-8.
  mt::core::Generator gen(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s(1 + gen.below(40), '\0');
    for (char& c : s) c = static_cast<char>(gen.below(256));
    for (const std::string& w : basic_tokenize(s, trial % 2 == 0)) {
      EXPECT_FALSE(w.empty());
      EXPECT_TRUE(valid_utf8(w)) << "trial " << trial;
    }
    const WordPieceTokenizer tok = small_tokenizer();
    for (const int32_t id : tok.encode(s)) EXPECT_TRUE(id >= 0 && id < tok.vocab_size());
  }
}

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  const WordPieceTokenizer tok = small_tokenizer();
  EXPECT_EQ(tokens_of(tok, "unaffable"), (Words{"un", "##aff", "##able"}));
  EXPECT_EQ(tokens_of(tok, "Playing plays play"), (Words{"play", "##ing", "play", "##s", "play"}));
  // Longest match first: "aab" is a ##a ##b, and "xxx" is x ##x ##x.
  EXPECT_EQ(tokens_of(tok, "aab xxx"), (Words{"a", "##a", "##b", "x", "##x", "##x"}));
  EXPECT_EQ(tokens_of(tok, "Hello, world!"), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(tokens_of(tok, "中国"), (Words{"中", "国"}));
}

TEST(WordPiece, UnknownWordsBecomeOneUnk) {
  const WordPieceTokenizer tok = small_tokenizer();
  EXPECT_EQ(tokens_of(tok, "xyzzy"), (Words{"[UNK]"}));
  // A prefix matches but the rest does not: the whole word is [UNK], not "play [UNK]".
  EXPECT_EQ(tokens_of(tok, "playz the"), (Words{"[UNK]", "the"}));
  EXPECT_EQ(tokens_of(tok, "日本"), (Words{"[UNK]", "[UNK]"}));
}

TEST(WordPiece, WordsOverOneHundredCharactersAreUnknown) {
  const WordPieceTokenizer tok = small_tokenizer();
  const std::vector<int32_t> ids100 = tok.encode(std::string(100, 'x'));
  ASSERT_EQ(ids100.size(), 100u);
  EXPECT_EQ(tok.token(ids100[0]), "x");
  EXPECT_EQ(tok.token(ids100[99]), "##x");
  EXPECT_EQ(tokens_of(tok, std::string(101, 'x') + " the"), (Words{"[UNK]", "the"}));
  // Characters, not bytes: 60 two-byte letters are one word of 60 characters.
  std::string accented;
  for (int i = 0; i < 60; ++i) accented += "é";
  EXPECT_EQ(basic_tokenize(accented, false).size(), 1u);
  EXPECT_EQ(tokens_of(small_tokenizer(false), accented), (Words{"[UNK]"}));
}

TEST(WordPiece, CasedTokenizerKeepsAccentsAndCase) {
  const WordPieceTokenizer cased = small_tokenizer(false);
  EXPECT_EQ(tokens_of(cased, "café"), (Words{"café"}));
  EXPECT_EQ(tokens_of(cased, "Cafe"), (Words{"[UNK]"}));
  EXPECT_EQ(tokens_of(small_tokenizer(true), "CAFÉ"), (Words{"cafe"}));
}

TEST(WordPiece, EmptyTextGivesNoIds) {
  const WordPieceTokenizer tok = small_tokenizer();
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_TRUE(tok.encode("\n\n\t \n").empty());
}

TEST(WordPiece, DecodeGluesContinuationsAndSkipsPadding) {
  const WordPieceTokenizer tok = small_tokenizer();
  std::vector<int32_t> ids = tok.encode("unaffable plays, hello");
  ids.push_back(tok.pad_id());
  ids.insert(ids.begin(), tok.cls_id());
  EXPECT_EQ(tok.decode(ids), "[CLS] unaffable plays , hello");
  EXPECT_EQ(tok.decode(ids, /*skip_padding=*/false), "[CLS] unaffable plays , hello [PAD]");
  EXPECT_EQ(tok.decode({tok.id_of("the"), 999, -1}), "the <999?> <-1?>");
}

TEST(WordPiece, SpecialIdsAreTheBracketedTokens) {
  const WordPieceTokenizer tok = small_tokenizer();
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.sep_id(), 3);
  EXPECT_EQ(tok.mask_id(), 4);
  EXPECT_EQ(tok.special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(tok.is_special(tok.id_of("the")));
  EXPECT_EQ(tok.id_of("nope"), -1);
  EXPECT_THROW(tok.token(tok.vocab_size()), Error);
}

TEST(VocabFile, ReadsSavesAndRoundTrips) {
  const std::string dir = make_temp_dir();
  const std::string path = dir + "/vocab.txt";
  small_tokenizer().save(path);
  const WordPieceTokenizer back = WordPieceTokenizer::from_file(path, true);
  EXPECT_EQ(back.tokens(), small_vocab());
  // Windows line ends and trailing spaces are tolerated.
  write_file(dir + "/crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS] \r\n[SEP]\r\n[MASK]\r\nhi\r\n");
  const WordPieceTokenizer crlf = WordPieceTokenizer::from_file(dir + "/crlf.txt", true);
  EXPECT_EQ(crlf.vocab_size(), 6);
  EXPECT_EQ(crlf.id_of("hi"), 5);
  EXPECT_EQ(crlf.cls_id(), 2);
}

TEST(VocabFile, ErrorsNameTheProblem) {
  const std::string dir = make_temp_dir();
  EXPECT_TRUE(contains(error_of([&] { WordPieceTokenizer::from_file(dir + "/absent.txt", true); }),
                       "absent.txt cannot be opened"));
  write_file(dir + "/empty.txt", "");
  EXPECT_TRUE(contains(error_of([&] { WordPieceTokenizer::from_file(dir + "/empty.txt", true); }),
                       "is empty"));
  write_file(dir + "/dup.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nof\nthe\n");
  const std::string dup = error_of([&] { WordPieceTokenizer::from_file(dir + "/dup.txt", true); });
  EXPECT_TRUE(contains(dup, "duplicate token \"the\" at lines 6 and 8"));
  write_file(dir + "/nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  EXPECT_TRUE(contains(error_of([&] { WordPieceTokenizer::from_file(dir + "/nomask.txt", true); }),
                       "no [MASK] token"));
  write_file(dir + "/blank.txt", "[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n");
  EXPECT_TRUE(contains(error_of([&] { WordPieceTokenizer::from_file(dir + "/blank.txt", true); }),
                       "blank.txt:3: empty line"));
  EXPECT_THROW(WordPieceTokenizer({}, true), Error);
}

TEST(WordPieceTrainer, MergesInTheDocumentedOrder) {
  // ab x5, abc x2, cd x3, xy x2. Pairs: (a,##b) 7, (c,##d) 3, (##b,##c) 2, (x,##y) 2.
  // "ab" first (7); then (ab,##c) 2 "abc", (c,##d) 3 "cd", (x,##y) 2 "xy": "cd" (3); then a
  // tie at 2 between "abc" and "xy": the smaller string, "abc", goes first.
  const std::map<std::string, int64_t, std::less<>> counts = {{"ab", 5}, {"abc", 2}, {"cd", 3}, {"xy", 2}};
  WordPieceTrainerOptions opt;
  opt.vocab_size = 100;
  const std::vector<std::string> vocab = train_wordpiece_vocab(counts, opt);
  // Alphabet: a start form for every character, "##" forms for those seen inside a word,
  // sorted by bytes ('#' < 'a').
  const std::vector<std::string> expected = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                             "##b", "##c", "##d", "##y", "a", "b", "c", "d", "x", "y",
                                             "ab", "cd", "abc", "xy"};
  EXPECT_EQ(vocab, expected);
  opt.vocab_size = 16;  // stops at the size
  EXPECT_EQ(train_wordpiece_vocab(counts, opt),
            std::vector<std::string>(expected.begin(), expected.begin() + 16));
  opt.vocab_size = 100;
  opt.min_pair_count = 3;  // "abc" and "xy" (2) are too rare
  EXPECT_EQ(train_wordpiece_vocab(counts, opt),
            std::vector<std::string>(expected.begin(), expected.begin() + 17));
}

// The trainer's incremental pair counts against a plain re-count of every pair after every
// merge (slow, obviously right), on words with repeats such as "aaaa" where merges overlap.
std::vector<std::string> naive_merges(const std::map<std::string, int64_t, std::less<>>& counts,
                                      size_t merges) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < w.size(); ++i) pieces.push_back((i ? "##" : "") + w.substr(i, 1));
    words.emplace_back(pieces, c);
  }
  std::vector<std::string> made;
  while (made.size() < merges) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [p, c] : words)
      for (size_t i = 0; i + 1 < p.size(); ++i) pairs[{p[i], p[i + 1]}] += c;
    if (pairs.empty()) break;
    std::pair<std::string, std::string> best;
    int64_t best_count = -1;
    std::string best_merged;
    for (const auto& [pr, c] : pairs) {
      const std::string merged = pr.first + pr.second.substr(2);
      if (c > best_count || (c == best_count && merged < best_merged))
        best = pr, best_count = c, best_merged = merged;
    }
    if (best_count < 2) break;
    made.push_back(best_merged);
    for (auto& [p, c] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < p.size(); ++i) {
        if (i + 1 < p.size() && p[i] == best.first && p[i + 1] == best.second) {
          out.push_back(best_merged);
          ++i;
        } else {
          out.push_back(p[i]);
        }
      }
      p = out;
    }
  }
  return made;
}

TEST(WordPieceTrainer, IncrementalCountsMatchARecount) {
  mt::core::Generator gen(11);
  std::map<std::string, int64_t, std::less<>> counts;
  for (int i = 0; i < 300; ++i) {
    std::string w;
    for (int k = 0, n = 1 + int(gen.below(7)); k < n; ++k) w.push_back("aabbcd"[gen.below(6)]);
    counts[w] += 1 + int64_t(gen.below(9));
  }
  WordPieceTrainerOptions opt;
  opt.vocab_size = 10000;
  const std::vector<std::string> vocab = train_wordpiece_vocab(counts, opt);
  const size_t alphabet = 5 + 4 + 4;  // specials, a b c d, ##a ##b ##c ##d
  ASSERT_GT(vocab.size(), alphabet + 20);
  std::vector<std::string> merges = naive_merges(counts, 100000);
  // The vocabulary lists each new string once; the naive list may repeat one made twice.
  std::vector<std::string> unique_merges;
  for (const std::string& m : merges)
    if (std::find(unique_merges.begin(), unique_merges.end(), m) == unique_merges.end() &&
        std::find(vocab.begin(), vocab.begin() + alphabet, m) == vocab.begin() + alphabet)
      unique_merges.push_back(m);
  EXPECT_EQ(std::vector<std::string>(vocab.begin() + alphabet, vocab.end()), unique_merges);
}

TEST(WordPieceTrainer, BuildsADeterministicVocabularyThatCoversItsCorpus) {
  // A generated corpus: 400 pseudo-words from a small syllable set, Zipf-like frequencies.
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "tern", "ing", "re", "s", "qu",
                                              "ax", "ble", "th", "é"};
  mt::core::Generator gen(3);
  std::vector<std::string> lexicon;
  for (int i = 0; i < 400; ++i) {
    std::string w;
    for (int k = 0, n = 1 + int(gen.below(4)); k < n; ++k) w += syllables[gen.below(syllables.size())];
    lexicon.push_back(w);
  }
  std::string text;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t r = gen.below(400);
    text += lexicon[(r * r) / 400] + (i % 13 == 0 ? ". " : " ");
  }
  WordCounter counter(true);
  counter.add_text(text);
  WordPieceTrainerOptions opt;
  opt.vocab_size = 300;
  const std::vector<std::string> vocab = train_wordpiece_vocab(counter.counts(), opt);
  ASSERT_EQ(vocab.size(), 300u);
  EXPECT_EQ(std::vector<std::string>(vocab.begin(), vocab.begin() + 5),
            (std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}));
  // Punctuation never continues a word, so it has no "##" form.
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "."), 1);
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "##."), 0);
  // é is stripped to e before counting.
  EXPECT_EQ(std::count_if(vocab.begin(), vocab.end(),
                          [](const std::string& t) { return t.find("é") != std::string::npos; }),
            0);

  WordCounter again(true);
  again.add_text(text);
  EXPECT_EQ(train_wordpiece_vocab(again.counts(), opt), vocab);

  const WordPieceTokenizer tok(vocab, true, "built");
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.unk_id()), 0);
  // The merges pay off: far fewer pieces than characters.
  size_t letters = 0;
  for (const char c : text) letters += c != ' ';
  EXPECT_LT(ids.size() * 2, letters);
  // Text with an unseen character gives [UNK] for that word only.
  const std::vector<int32_t> mixed = tok.encode("Kalo zzz");
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), tok.unk_id()), 1);
  EXPECT_EQ(mixed.back(), tok.unk_id());
  EXPECT_EQ(tok.decode(std::vector<int32_t>(mixed.begin(), mixed.end() - 1)), "kalo");
}

TEST(WordPieceTrainer, RejectsBadOptions) {
  const std::map<std::string, int64_t, std::less<>> counts = {{"ab", 1}};
  WordPieceTrainerOptions opt;
  opt.vocab_size = 5;
  EXPECT_TRUE(contains(error_of([&] { train_wordpiece_vocab(counts, opt); }), "too small"));
  opt.vocab_size = 100;
  EXPECT_TRUE(contains(error_of([&] { train_wordpiece_vocab({}, opt); }), "no words"));
}

TEST(WordPieceTrainer, FortunesCorpusInSeconds) {
  const char* kFortunes = "/usr/share/games/fortunes";
  if (!fs::exists(kFortunes))
    GTEST_SKIP() << kFortunes << " is absent: apt-get install fortunes to run this test";
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> files = expand_corpus_files({std::string(kFortunes) + "/*"});
  WordCounter counter(true);
  for_each_document(files, [&](std::string_view doc) { counter.add_text(doc); });
  WordPieceTrainerOptions opt;
  opt.vocab_size = 8192;
  const WordPieceTokenizer tok(train_wordpiece_vocab(counter.counts(), opt), true, "fortunes");
  int64_t tokens = 0, unknown = 0;
  for_each_document(files, [&](std::string_view doc) {
    for (const int32_t id : tok.encode(doc)) tokens += 1, unknown += id == tok.unk_id();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok.vocab_size(), 8192);
  EXPECT_GT(tokens, 400000);
  EXPECT_LT(double(unknown), 0.001 * double(tokens));
  // About 1 s on the 2-core dev VM; the bound leaves room for a busy machine.
  EXPECT_LT(seconds, 20.0);
  std::printf("fortunes: %zu files, %lld tokens (%lld [UNK]), vocabulary built and applied in %.2f s\n",
              files.size(), static_cast<long long>(tokens), static_cast<long long>(unknown), seconds);
}
