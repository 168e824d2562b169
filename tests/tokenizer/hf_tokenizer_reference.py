#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for the C++ tokenizer's cross-check (test only).

Trains byte-level BPE tokenizers with `tokenizers` itself (no hub) on data/corpus.txt plus a
Unicode stress text, in the layouts the C++ side supports:
  gpt2         ByteLevel(add_prefix_space false, GPT-2 regex), <|endoftext|>, an added "vescale"
  gpt2_prefix  the same with add_prefix_space true
  llama3       Sequence[Split(LLaMA-3 regex, Isolated), ByteLevel(use_regex false)],
               ignore_merges, <|begin_of_text|> prepended by TemplateProcessing
  qwen2        NFC, then Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex false)],
               <|endoftext|> <|im_start|> <|im_end|>, and a normalized added "cafe\u0301"
and writes into --out: NAME.json (tokenizer.json), stress.txt, qwen.txt (text for the Qwen2
layout: single digits, contractions, newline and space runs, text NFC changes), and for each
tokenizer and text NAME.TEXT.ids (int32 little-endian; TEXT is corpus or stress, plus
stress_special with add_special_tokens; qwen2 also on qwen), qwen2.TEXT.nfc (the text as
`tokenizers`' NFC leaves it, what decode gives back), then unicode_classes.txt: the code point
ranges that `tokenizers`'s regex engine puts in \\p{L}, \\p{N} and \\s ("first last class", hex),
for the C++ tables, and nfc.json: `tokenizers`' NFC of every code point it changes and of
random mark sequences, for the C++ NFC tables.

usage: hf_tokenizer_reference.py --out DIR [--corpus data/corpus.txt]
"""
import argparse
import json
import os
import random
import struct
import sys
import unicodedata

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
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


def nfc_pool():
    """Characters NFC works on (Python's Unicode data, newer than tokenizers' 9.0, only picks
    them): combining marks, canonical decompositions, Hangul jamo and syllables, and starters
    that compose with a starter before them."""
    pool = [0x61, 0x41, 0x65, 0x3C, 0x3D, 0x20]
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        d = unicodedata.decomposition(chr(c))
        if unicodedata.combining(chr(c)) or (d and not d.startswith("<")):
            pool.append(c)
            pool += [int(x, 16) for x in d.split()] if d and not d.startswith("<") else []
    pool += list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3))
    pool += [0xAC00, 0xAC01, 0xD7A3, 0xAE4C]
    return sorted(set(pool))


def nfc_sequences(rng, pool, count):
    return ["".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 8))) for _ in range(count)]


def qwen_text():
    """What the Qwen2 layout does differently: single digits, mixed-case contractions, newline
    and whitespace runs, and text that NFC changes (combining marks to compose and reorder,
    singletons, Hangul jamo), then random mark sequences."""
    parts = [
        "Digits: 1 12 123 12345 1234567890 3.14159 x1y22z333 ١٢٣٤٥ ²³ ½ Ⅻ ⑦ 2024-05-20\n",
        "Contractions: DON'T don't Don'T I'M i'm YOU'RE We'Ll THEY'VE she'S it'D 'S 'LL it'ſ\n",
        "Newlines:\r\n\r\n\r\nx\n\n\ny\r\r\rz \n \n\t\n  end\r\n",
        "Spaces:  two   three    four\t\ttabs \u3000\u00a0\u2003 x     \n",
        "Café naïve Ångström 中文字符测试 日本語 한국어 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️\n",
        "NFC: e\u0301 E\u0301 a\u0308 n\u0303 o\u0302\u0301 a\u0323\u0302 a\u0302\u0323 "
        "q\u0307\u0323 \u212b \u2126 \u212a \u0958 \uf900 \u0344 \u0f73 \u1e9b\u0323 "
        "\u1100\u1161\u11a8 \uac00\u11a8 \u1100\u1161 <\u0338 =\u0338 "
        "cafe\u0301 and café and Cafe\u0301s\n",
        "Chat: <|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>"
        "<|endoftext|>\n",
    ]
    rng = random.Random(99)
    seqs = nfc_sequences(rng, nfc_pool(), 3000)
    seps = [" ", "", "", "x", "\n", "1", "'s"]
    parts.append("".join(s + rng.choice(seps) for s in seqs) + "\n")
    return "".join(parts)


def bpe_tokenizer(layout):
    tok = Tokenizer(models.BPE(ignore_merges=(layout == "llama3")))
    if layout in ("llama3", "qwen2"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX if layout == "llama3" else QWEN2_REGEX),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
        if layout == "qwen2":
            tok.normalizer = normalizers.NFC()
            specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
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
    elif layout == "qwen2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        # Normalized: matched as its NFC ("café") in the NFC'd text.
        tok.add_tokens([AddedToken("cafe\u0301", normalized=True, special=False)])
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


def nfc_cases(path):
    """tokenizers' NFC of every code point it changes, and of random mark sequences."""
    nfc = normalizers.NFC()
    sep = "\ue000"  # a character NFC leaves alone and nothing composes with
    cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c != 0xE000]
    out = nfc.normalize_str(sep.join(map(chr, cps))).split(sep)
    assert len(out) == len(cps)
    changed = [[c, o] for c, o in zip(cps, out) if o != chr(c)]
    seqs = nfc_sequences(random.Random(7), nfc_pool(), 50000)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"changed": changed, "sequences": [[s, nfc.normalize_str(s)] for s in seqs]}, f)


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
    qwen = qwen_text()
    qwen_path = os.path.join(args.out, "qwen.txt")
    with open(qwen_path, "w", encoding="utf-8", newline="") as f:
        f.write(qwen)
    texts = {"corpus": corpus, "stress": stress}
    for layout in ("gpt2", "gpt2_prefix", "llama3", "qwen2"):
        files = [args.corpus, stress_path, stress_path] + ([qwen_path] if layout == "qwen2" else [])
        tok = train(layout, files)
        tok.save(os.path.join(args.out, f"{layout}.json"))
        tok = Tokenizer.from_file(os.path.join(args.out, f"{layout}.json"))  # what C++ reads
        for name, text in dict(texts, **({"qwen": qwen} if layout == "qwen2" else {})).items():
            write_ids(os.path.join(args.out, f"{layout}.{name}.ids"), tok.encode(text, add_special_tokens=False).ids)
            if layout == "qwen2":
                with open(os.path.join(args.out, f"{layout}.{name}.nfc"), "w", encoding="utf-8", newline="") as f:
                    f.write(tok.normalizer.normalize_str(text))
        write_ids(os.path.join(args.out, f"{layout}.stress_special.ids"), tok.encode(stress).ids)
    unicode_classes(os.path.join(args.out, "unicode_classes.txt"))
    nfc_cases(os.path.join(args.out, "nfc.json"))
    print(f"hf_tokenizer_reference: wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
