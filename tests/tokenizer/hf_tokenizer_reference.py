#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for the C++ tokenizer's cross-check (test only).

Trains byte-level BPE tokenizers with `tokenizers` itself (no hub) on data/corpus.txt plus a
Unicode stress text, in the two layouts the C++ side supports:
  gpt2         ByteLevel(add_prefix_space false, GPT-2 regex), <|endoftext|>, an added "vescale"
  gpt2_prefix  the same with add_prefix_space true
  llama3       Sequence[Split(LLaMA-3 regex, Isolated), ByteLevel(use_regex false)],
               ignore_merges, <|begin_of_text|> prepended by TemplateProcessing
and writes into --out: NAME.json (tokenizer.json), stress.txt, and for each tokenizer and text
NAME.TEXT.ids (int32 little-endian; TEXT is corpus or stress, plus stress_special with
add_special_tokens), then unicode_classes.txt: the code point ranges that `tokenizers`'s regex
engine puts in \\p{L}, \\p{N} and \\s ("first last class", hex), for the C++ tables.

usage: hf_tokenizer_reference.py --out DIR [--corpus data/corpus.txt]
"""
import argparse
import os
import random
import struct
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 3000


def stress_text():
    """Accents, CJK, emoji, digit runs, whitespace runs, contractions in every case, then a
    seeded sample of code points from all of Unicode in word-like runs."""
    parts = [
        "Café, naïve, résumé, Ångström, Ærøskøbing, São Paulo, Zürich, façade, jalapeño.\n",
        "中文字符测试，日本語のテキスト、한국어 문장입니다。 漢字かなカナ混じり文。\n",
        "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🤖🚀✨ and text👍after.\n",
        "Digits: 1 12 123 1234 12345 1234567890 3.14159 1,000,000 2024-05-20 ١٢٣٤٥ ²³ ½ Ⅻ ⑦\n",
        "Spaces:  two   three    four\ttab\t\ttabs \t mixed\n\n\nthree newlines\r\nCRLF\r\n\r\nend  \n",
        "Trailing spaces   \n   leading spaces\n\u3000ideographic\u00a0nbsp\u2003em\u2028ls\u2029ps\x0bvt\x0cff\x85nel\n",
        "Contractions: I'm you're he's she'S it'd we'LL they've DON'T WON'T I'M YOU'RE "
        "We'Ll they'Ve 's 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x ''s '''' it'ſ 'ſ "
        "rock'n'roll o'clock ’s ‘quoted’ \"double\"\n",
        "Punctuation!!! ??? ... --- ((nested)) [brackets] {braces} <angles> @#$%^&*_+=|\\~`\n",
        "Mixed: abc123def 123abc abc_def x1y2z3 HTTP/1.1 e-mail user@example.com https://x.org/a?b=c\n",
        "Special tokens inline: <|endoftext|> and <|begin_of_text|> and vescale inside textvescaletext.\n",
        "Lines\n\n\n\n\nafter blank lines\n \n \n\t\n spaced blank lines\n",
        " " * 300 + "a long space run, then a long word: " + "abcdefghij" * 40 + "\n",
        "0123456789" * 30 + "\n",
        "Greek: Αλφα βήτα γάμμα. Cyrillic: Привет, мир! Hebrew: שלום עולם. Arabic: مرحبا بالعالم.\n",
        "Devanagari: नमस्ते दुनिया। Thai: สวัสดีชาวโลก Combining: e\u0301 a\u0308 n\u0303\n",
    ]
    rng = random.Random(1234)
    pool = [c for c in range(0x80, 0x110000) if not (0xD800 <= c <= 0xDFFF)]
    seps = [" ", "  ", "\n", "\t", "", "", "", "1", "'", "'s", ".", " \n"]
    words = []
    for _ in range(3000):
        words.append("".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 6))) + rng.choice(seps))
    parts.append("".join(words) + "\n")
    # The characters the patterns treat specially, in random order: contractions, case,
    # whitespace kinds, newlines, digits, letters, others.
    tricky = ["'", "'", "s", "S", "t", "T", "r", "e", "E", "v", "m", "l", "L", "d", "D", "\u017f", " ",
              " ", " ", "\t", "\n", "\r", "\r\n", "\u3000", "\u00a0", "\x0b", "1", "2", "\u0663",
              "\u00bd", "a", "\u00e9", "\u4e2d", "!", ".", "\u2019", "\U0001F44D", "_", "x", "<|endoftext|>"]
    parts.append("".join(rng.choice(tricky) for _ in range(30000)) + "\n")
    return "".join(parts)


def bpe_tokenizer(layout):
    tok = Tokenizer(models.BPE(ignore_merges=(layout == "llama3")))
    if layout == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=(layout == "gpt2_prefix"),
                                                     use_regex=True)
        specials = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    return tok, specials


def train(layout, files):
    tok, specials = bpe_tokenizer(layout)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    if layout == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.add_tokens(["vescale"])  # a non-special added token
    return tok


def write_ids(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}i", *ids))


def unicode_classes(path):
    """Which code points tokenizers' regex engine (Oniguruma) puts in each class."""
    cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]
    text = "".join(map(chr, cps))
    cls = {}
    for name, pattern in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        kept = set()
        for piece, _ in pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text):
            kept.update(piece)
        for c in cps:
            if chr(c) not in kept:
                assert c not in cls, f"U+{c:04X} in two classes"
                cls[c] = name
    ranges = []
    for c in sorted(cls):
        if ranges and ranges[-1][1] == c - 1 and ranges[-1][2] == cls[c]:
            ranges[-1][1] = c
        else:
            ranges.append([c, c, cls[c]])
    with open(path, "w") as f:
        for first, last, name in ranges:
            f.write(f"{first:X} {last:X} {name}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default=os.path.join(os.path.dirname(__file__), "../../data/corpus.txt"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    stress = stress_text()
    stress_path = os.path.join(args.out, "stress.txt")
    with open(stress_path, "w", encoding="utf-8", newline="") as f:
        f.write(stress)
    corpus = open(args.corpus, encoding="utf-8", newline="").read()
    texts = {"corpus": corpus, "stress": stress}
    for layout in ("gpt2", "gpt2_prefix", "llama3"):
        tok = train(layout, [args.corpus, stress_path, stress_path])
        tok.save(os.path.join(args.out, f"{layout}.json"))
        tok = Tokenizer.from_file(os.path.join(args.out, f"{layout}.json"))  # what C++ reads
        for name, text in texts.items():
            write_ids(os.path.join(args.out, f"{layout}.{name}.ids"), tok.encode(text, add_special_tokens=False).ids)
        write_ids(os.path.join(args.out, f"{layout}.stress_special.ids"), tok.encode(stress).ids)
    unicode_classes(os.path.join(args.out, "unicode_classes.txt"))
    print(f"hf_tokenizer_reference: wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
