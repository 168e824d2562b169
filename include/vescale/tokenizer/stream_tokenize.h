// Text files -> llm.c .bin token files, streaming (vescale-tokenize is this behind a command
// line): PREFIX_train.bin and PREFIX_val.bin, the last val_fraction of the tokens in val.
//
//   vescale::tokenizer::StreamTokenizeOptions o;
//   o.inputs = {"book.txt"};
//   o.output = "data/book";
//   o.tokenizer = vescale::tokenizer::BpeTokenizer::from_file("data/tokenizer_bpe2048.json");
//   auto r = vescale::tokenizer::stream_tokenize(o);  // r.train_tokens, r.val_tokens, ...
//
// The text is never held whole: it is read in chunks of chunk_bytes, each cut where the ids
// cannot change (BpeTokenizer::safe_cut; a UTF-8 character or a word a read splits waits for the
// next read), encoded on `threads` workers and written in order. The ids equal those of
// encode() on the whole text, without special tokens (docs/tokenizer.md, Streaming).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vescale/tokenizer/bpe_tokenizer.h"

namespace vescale::tokenizer {

struct StreamTokenizeOptions {
  std::vector<std::string> inputs;        // text files, concatenated in order
  std::string output;                     // the prefix of PREFIX_train.bin and PREFIX_val.bin
  std::optional<BpeTokenizer> tokenizer;  // none: one token per byte (vocab 256)
  double val_fraction = 0.05;             // in [0, 0.5]
  int threads = 1;                        // encoding threads; 1 encodes on the caller's
  size_t chunk_bytes = size_t{4} << 20;   // bytes read at a time
  // After each chunk is written: input bytes done, of all, tokens written so far.
  std::function<void(uint64_t done, uint64_t total, int64_t tokens)> progress;
};

struct StreamTokenizeResult {
  uint64_t bytes = 0;  // of input
  std::string train_path, val_path;
  int64_t train_tokens = 0, val_tokens = 0;
};

// Throws vescale::Error naming the field for bad options, the file for a missing, non-regular
// or binary input (a NUL byte), and for what cannot be written.
StreamTokenizeResult stream_tokenize(const StreamTokenizeOptions& options);

}  // namespace vescale::tokenizer
