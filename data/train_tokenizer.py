#!/usr/bin/env python3
"""Trains the shipped byte-level BPE vocabulary on the built-in corpus with Hugging Face
`tokenizers` (dev-time only; vescale reads the result in C++): GPT-2 style, i.e. ByteLevel
pre-tokenizer with the GPT-2 regex and no prefix space, the 256-byte alphabet, <|endoftext|>
(id 0), 2048 tokens in all.

  /opt/vescale/venv/bin/python data/train_tokenizer.py data/corpus.txt > data/tokenizer_bpe2048.json
"""
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else "data/corpus.txt"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    sys.stdout.write(tok.to_str(pretty=True) + "\n")


if __name__ == "__main__":
    main()
