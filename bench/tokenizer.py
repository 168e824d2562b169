#!/usr/bin/env python3
"""HF tokenizers' side of bench/tokenizer.sh (bench only).

  tokenizer.py bench TOKENIZER_JSON TEXT RUNS   one JSON line per run, as build/bench/tokenizer_bench
                                                (and mbps_lines: encode_batch of the text's lines)
  tokenizer.py train-llama3 CORPUS OUT_JSON     a LLaMA-3-style vocabulary (Split + ByteLevel,
                                                ignore_merges, 2048 tokens) trained on CORPUS
Run with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false: one thread, like ours.
"""
import json
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bench(path, text_path, runs):
    tok = Tokenizer.from_file(path)
    text = open(text_path, encoding="utf-8", newline="").read()
    nbytes = len(text.encode("utf-8"))
    lines = text.splitlines(keepends=True)
    for run in range(runs):
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        s = time.perf_counter() - t0
        h = 1469598103934665603
        for i in ids:
            h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        # For context: the same text as a batch of lines (HF's usual input), still one thread.
        t0 = time.perf_counter()
        tok.encode_batch(lines, add_special_tokens=False)
        s_lines = time.perf_counter() - t0
        print(json.dumps({"run": run, "seconds": s, "mbps": nbytes / s / 1e6, "tokens": len(ids),
                          "hash": f"{h:016x}", "mbps_lines": nbytes / s_lines / 1e6}), flush=True)


def train_llama3(corpus, out):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    tok.save(out)


if __name__ == "__main__":
    if sys.argv[1] == "bench":
        bench(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        train_llama3(sys.argv[2], sys.argv[3])
