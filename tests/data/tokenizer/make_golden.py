#!/usr/bin/env python3
"""Writes the reference data of mintrain's BERT tokenizer tests (tests/test_bert_tokenizer_golden.cpp).

Run once, offline, after changing golden_inputs.txt or the vocabulary lists below:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python tests/data/tokenizer/make_golden.py

It writes, next to itself:
  vocab.txt        a small BERT-style vocabulary: the special tokens, single characters of every
                   script in the inputs ("c" and "##c"), and whole words / pieces in several scripts,
                   so that the inputs go through real WordPiece splits (and a few [UNK]s);
  golden.tsv       per input line: its bytes (hex) and the ids of Google's tokenization.py logic
                   (the reference mintrain follows) and of HuggingFace `tokenizers`'
                   BertWordPieceTokenizer, uncased and cased, with the documented reason where the
                   two references disagree;
  sweep.txt.gz     every code point assigned in this Python's Unicode database (except surrogates)
                   between two letters, "a" + c + "b": the reference's basic tokens, uncased and cased;
  fortunes.tsv     per file of Debian's fortunes corpus: a CRC-32 of its bytes and of the
                   reference's ids (uncased, cased) on vocab.txt;
  hf_differences.txt  where HuggingFace's tokenizer departs from Google's in the sweep, by category.

Google's tokenization.py (github.com/google-research/bert) is not on PyPI; its BasicTokenizer and
WordpieceTokenizer are re-stated below step by step (_clean_text, _tokenize_chinese_chars,
whitespace_tokenize, lower() + _run_strip_accents, _run_split_on_punc, greedy longest match with
max_input_chars_per_word = 100). Bytes are decoded as its convert_to_unicode does:
utf-8 with errors="ignore".
"""

import glob
import gzip
import os
import sys
import unicodedata
import zlib

from tokenizers import BertWordPieceTokenizer, Tokenizer, models, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
FORTUNES = "/usr/share/games/fortunes"
MAX_INPUT_CHARS_PER_WORD = 100


# --- Google's tokenization.py, BasicTokenizer + WordpieceTokenizer -------------------------------

def is_whitespace(ch):
    if ch in " \t\n\r":
        return True
    return unicodedata.category(ch) == "Zs"


def is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def clean_text(text):
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        out.append(" " if is_whitespace(ch) else ch)
    return "".join(out)


def tokenize_chinese_chars(text):
    return "".join(f" {ch} " if is_chinese_char(ord(ch)) else ch for ch in text)


def strip_accents(text):
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")


def split_on_punc(text):
    out = []
    start_new_word = True
    for ch in text:
        if is_punctuation(ch):
            out.append([ch])
            start_new_word = True
        else:
            if start_new_word:
                out.append([])
            start_new_word = False
            out[-1].append(ch)
    return ["".join(w) for w in out]


def basic_tokenize(text, lower):
    text = tokenize_chinese_chars(clean_text(text))
    split = []
    for token in whitespace_tokenize(text):
        if lower:
            token = strip_accents(token.lower())
        split.extend(split_on_punc(token))
    return whitespace_tokenize(" ".join(split))


def wordpiece(token, vocab):
    chars = list(token)
    if len(chars) > MAX_INPUT_CHARS_PER_WORD:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(chars):
        end, found = len(chars), None
        while start < end:
            sub = "".join(chars[start:end])
            if start > 0:
                sub = "##" + sub
            if sub in vocab:
                found = sub
                break
            end -= 1
        if found is None:
            return ["[UNK]"]
        pieces.append(found)
        start = end
    return pieces


def google_ids(data, lower, vocab):
    text = data.decode("utf-8", "ignore")
    return [vocab[p] for t in basic_tokenize(text, lower) for p in wordpiece(t, vocab)]


# --- HuggingFace tokenizers ----------------------------------------------------------------------

def hf_as_shipped(vocab_path, lower):
    # What a user gets: the special tokens are "added tokens", matched in the raw text.
    return BertWordPieceTokenizer(vocab_path, lowercase=lower)


def hf_pipeline(vocab_path, lower):
    # The same normalizer, pre-tokenizer and model without added tokens.
    tok = Tokenizer(models.WordPiece.from_file(vocab_path, unk_token="[UNK]",
                                               max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=lower, lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def hf_basic_tokenize(tok, text):
    return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))]


# --- inputs and vocabulary -----------------------------------------------------------------------

def parse_inputs(path):
    """(source line, bytes) for every input line; see golden_inputs.txt for the escapes."""
    inputs = []
    for line in open(path, encoding="utf-8").read().split("\n"):
        if not line or line.startswith("# "):
            continue
        out, i = bytearray(), 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                kind = line[i + 1]
                if kind in "\\tnr":
                    out += {"\\": b"\\", "t": b"\t", "n": b"\n", "r": b"\r"}[kind]
                    i += 2
                elif kind in "uUx":
                    n = {"u": 4, "U": 8, "x": 2}[kind]
                    value = int(line[i + 2:i + 2 + n], 16)
                    out += bytes([value]) if kind == "x" else chr(value).encode("utf-8", "surrogatepass")
                    i += 2 + n
                else:
                    sys.exit(f"{path}: unknown escape \\{kind} in: {line}")
            else:
                out += ch.encode("utf-8")
                i += 1
        inputs.append((line, bytes(out)))
    return inputs


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(10)]
# Whole words (after basic tokenization, in both modes): the greedy match prefers them.
WHOLE_WORDS = """the quick brown fox jumps over The Hello hello world World play un ##aff ##able
##ing ##s ##ed Café café cafe naïve Straße strasse Ångström Tiếng tiếng Việt việt ngôn ngữ Ελληνικά
ελληνικα γλώσσα γλωσσα οδος οδοσ ΟΔΟΣ Москва москва столица России россии привет мир Հայաստան
հայաստան 한국어 텍스트 안녕 カタカナ ひらがな 日本語 مرحبا بالعالم العربية नमस्ते नमसत हिन्दी
ภาษา ไทย שלום עולם""".split()
# Words added as two pieces, a head and a "##" tail, so that whole-word matches fail over to them.
SPLIT_WORDS = """believing approx playing Played Crème brûlée française señor Muñoz Dvořák Şişli
İstanbul istanbul ISTANBUL TIẾNG VIỆT ĐẸP καλημέρα κόσμε ПРИВЕТ столица Ёлка Їжак ՀԱՅԵՐԵՆ
ქართული 텍스트입니다 안녕하세요 東京タワー テキスト اللُّغَةُ العَرَبِيَّة שָׁלוֹם עוֹלָם दुनिया भाषा
क्षत्रिय বাংলা தமிழ் తెలుగు ภาษาไทยเป็นภาษาที่สวยงาม ພາສາລາວ ភាសាខ្មែរ Snake CamelCase example""".split()
# Left out on purpose, so that some words have no segmentation and become [UNK].
EXCLUDED = {"\U0001F600", "\u2603", "##q", "##z", "##\u00DF", "##\U0001F3FD"}


def build_vocab(inputs):
    tokens = set()

    def add(t):
        if t and t not in EXCLUDED:
            tokens.add(t)

    for cp in range(33, 127):
        add(chr(cp))
        if chr(cp).isalnum():
            add("##" + chr(cp))
    for lower in (True, False):
        for word in WHOLE_WORDS:
            prefix = "##" if word.startswith("##") else ""
            for t in basic_tokenize(word[len(prefix):], lower):
                add(prefix + t)
        for word in SPLIT_WORDS:
            for t in basic_tokenize(word, lower):
                if len(t) >= 2:
                    add(t[:len(t) // 2])
                    add("##" + t[len(t) // 2:])
        for _, data in inputs:
            for t in basic_tokenize(data.decode("utf-8", "ignore"), lower):
                for ch in t:
                    add(ch)
                    add("##" + ch)
    return SPECIALS + sorted(t for t in tokens if t not in SPECIALS)


# --- the reasons HuggingFace's ids may differ from Google's --------------------------------------

def without_other_chars(text):
    # HF removes every C* character (private use Co, unassigned Cn too); Google only Cc and Cf.
    return "".join(ch for ch in text if not unicodedata.category(ch) in ("Co", "Cn", "Cs"))


def hf_difference_reason(text, lower, vocab, pipeline, shipped):
    """Why HF's ids differ from Google's on `text`; exits when no documented quirk explains it."""
    g = lambda t: google_ids(t.encode("utf-8", "surrogatepass"), lower, vocab)
    if pipeline.encode(text, add_special_tokens=False).ids == g(text):
        return "hf-matches-special-token-strings"
    reasons = []
    neutral = text
    if without_other_chars(neutral) != neutral:
        neutral = without_other_chars(neutral)
        reasons.append("hf-drops-private-use-and-unassigned")
    if lower and "\u03A3" in neutral:
        neutral = neutral.replace("\u03A3", "\u03C3")
        reasons.append("hf-lowercases-final-sigma-to-sigma")
    if reasons and pipeline.encode(neutral, add_special_tokens=False).ids == g(neutral):
        shipped_same = shipped.encode(neutral, add_special_tokens=False).ids == g(neutral)
        if not shipped_same:
            reasons.append("hf-matches-special-token-strings")
        return "+".join(reasons)
    sys.exit(f"HF and Google differ on {text!r} (lower={lower}) for no documented reason")


# --- writers -------------------------------------------------------------------------------------

def ids_text(ids):
    return " ".join(map(str, ids))


def write_golden(inputs, vocab, vocab_path):
    lines = ["# Reference ids of golden_inputs.txt on vocab.txt; written by make_golden.py.",
             "# Columns: input bytes (hex) | Google uncased | Google cased | HF uncased | HF cased"
             " | why HF differs (uncased; cased), '-' where it does not",
             f"# Python {sys.version.split()[0]}, unicodedata {unicodedata.unidata_version},"
             f" tokenizers {__import__('tokenizers').__version__}"]
    shipped = {lower: hf_as_shipped(vocab_path, lower) for lower in (True, False)}
    pipeline = {lower: hf_pipeline(vocab_path, lower) for lower in (True, False)}
    differing = 0
    for source, data in inputs:
        text = data.decode("utf-8", "ignore")
        cols = [data.hex()]
        google = {lower: google_ids(data, lower, vocab) for lower in (True, False)}
        hf = {lower: shipped[lower].encode(text, add_special_tokens=False).ids for lower in (True, False)}
        reasons = []
        for lower in (True, False):
            if hf[lower] == google[lower]:
                reasons.append("-")
            else:
                differing += 1
                reasons.append(hf_difference_reason(text, lower, vocab, pipeline[lower], shipped[lower]))
        cols += [ids_text(google[True]), ids_text(google[False]), ids_text(hf[True]),
                 ids_text(hf[False]), ";".join(reasons)]
        lines.append("# " + source)
        lines.append("\t".join(cols))
    open(os.path.join(HERE, "golden.tsv"), "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print(f"golden.tsv: {len(inputs)} inputs, HF differs from Google on {differing} (input, case) pairs")


def shape(tokens, ch):
    """A sweep result, short where it has a common shape: W "a<c>b" whole, S "a" "<c>" "b",
    J "ab" (c removed), B "a" "b" (c separates); else the tokens, code points in hex joined by
    '.', tokens joined by ','."""
    common = {("a" + ch + "b",): "W", ("a", ch, "b"): "S", ("ab",): "J", ("a", "b"): "B"}
    return common.get(tuple(tokens)) or ",".join(".".join(f"{ord(c):x}" for c in t) for t in tokens)


def write_sweep(vocab_path):
    hf = {lower: hf_pipeline(vocab_path, lower) for lower in (True, False)}
    rows = []  # [first, last, category, uncased, cased, whether later code points may join]
    hf_diffs = {}
    for cp in range(0x110000):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat in ("Cn", "Cs"):
            continue
        text = "a" + ch + "b"
        results = []
        for lower in (True, False):
            tokens = basic_tokenize(text, lower)
            results.append(shape(tokens, ch))
            if hf_basic_tokenize(hf[lower], text) != tokens:
                key = (cat, "uncased" if lower else "cased")
                hf_diffs.setdefault(key, []).append(cp)
        unc, cas = results
        compressible = all(len(r) == 1 for r in results)
        if (compressible and rows and rows[-1][5] and rows[-1][1] == cp - 1
                and rows[-1][2:5] == [cat, unc, cas]):
            rows[-1][1] = cp
        else:
            rows.append([cp, cp, cat, unc, cas, compressible])
    out = ["# Basic tokens of \"a\" + c + \"b\" for every code point c assigned in Python's"
           f" unicodedata {unicodedata.unidata_version} (surrogates excluded); written by make_golden.py.",
           "# first[-last] category uncased cased; W = one word a<c>b, S = a <c> b, J = ab, B = a b;"
           " else tokens as hex code points ('.' within a token, ',' between tokens)"]
    for row in rows:
        first, last, cat, unc, cas = row[:5]
        span = f"{first:x}" if first == last else f"{first:x}-{last:x}"
        out.append(f"{span} {cat} {unc} {cas}")
    with gzip.GzipFile(os.path.join(HERE, "sweep.txt.gz"), "wb", mtime=0) as f:
        f.write(("\n".join(out) + "\n").encode("utf-8"))
    report = ["Where HuggingFace tokenizers' BERT normalizer + pre-tokenizer departs from Google's",
              "BasicTokenizer on \"a\" + c + \"b\" (written by make_golden.py); category, case, count,"
              " first code points:"]
    for (cat, mode), cps in sorted(hf_diffs.items()):
        report.append(f"{cat} {mode} {len(cps)}: " + " ".join(f"U+{cp:04X}" for cp in cps[:12])
                      + (" ..." if len(cps) > 12 else ""))
    open(os.path.join(HERE, "hf_differences.txt"), "w", encoding="utf-8").write("\n".join(report) + "\n")
    print(f"sweep.txt.gz: {len(out) - 2} lines; HF differs in {sum(map(len, hf_diffs.values()))} cases")


def corpus_files():
    """The fortunes files as mintrain's corpus reader takes them (text_corpus.cpp)."""
    files, seen = [], set()
    for path in sorted(glob.glob(FORTUNES + "/*")):
        real = os.path.realpath(path)
        if path.endswith(".dat") or not os.path.isfile(real) or real in seen:
            continue
        with open(real, "rb") as f:
            if b"\0" in f.read(65536):
                continue
        seen.add(real)
        files.append(path)
    return files


def write_fortunes(vocab, vocab_path):
    if not os.path.isdir(FORTUNES):
        print(f"{FORTUNES} is absent (apt-get install fortunes): fortunes.tsv not written")
        return
    shipped = {lower: hf_as_shipped(vocab_path, lower) for lower in (True, False)}
    lines = ["# Debian fortunes corpus: file, byte count, CRC-32 of the bytes, then per case the",
             "# number of ids and CRC-32 of the ids in decimal joined by single spaces (Google's",
             "# reference on vocab.txt, the whole file as one text). Written by make_golden.py."]
    hf_files = 0
    for path in corpus_files():
        data = open(path, "rb").read()
        cols = [os.path.basename(path), str(len(data)), f"{zlib.crc32(data):08x}"]
        for lower in (True, False):
            ids = google_ids(data, lower, vocab)
            cols += [str(len(ids)), f"{zlib.crc32(ids_text(ids).encode()):08x}"]
            hf_ids = shipped[lower].encode(data.decode("utf-8", "ignore"), add_special_tokens=False).ids
            hf_files += hf_ids != ids
        lines.append("\t".join(cols))
    open(os.path.join(HERE, "fortunes.tsv"), "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print(f"fortunes.tsv: {len(lines) - 3} files; HF differs from Google on {hf_files} (file, case) pairs")


def main():
    inputs = parse_inputs(os.path.join(HERE, "golden_inputs.txt"))
    tokens = build_vocab(inputs)
    vocab_path = os.path.join(HERE, "vocab.txt")
    open(vocab_path, "w", encoding="utf-8").write("\n".join(tokens) + "\n")
    vocab = {t: i for i, t in enumerate(tokens)}
    print(f"vocab.txt: {len(tokens)} tokens")
    write_golden(inputs, vocab, vocab_path)
    write_fortunes(vocab, vocab_path)
    write_sweep(vocab_path)


if __name__ == "__main__":
    main()
