// Token data in llm.c's .bin format, and the data-parallel loader over it.
//
// A .bin file is a 256 x int32 header then the tokens: magic 20240520 with version 1 for
// uint16 tokens (GPT-2), or magic 20240801 with version 7 for uint32 tokens (LLaMA-3);
// header[2] is the token count. Files are memory-mapped. They are written by
// tokenizer/token_file.h (vescale-tokenize, tokenizer/stream_tokenize.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vescale::train {

// One or more .bin shards seen as a single token stream.
class TokenDataset {
 public:
  // Throws naming the file for a missing file, a bad magic or version, or a truncated body.
  explicit TokenDataset(const std::vector<std::string>& paths);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  int64_t size() const { return total_; }
  int64_t token(int64_t i) const;
  // Tokens [begin, begin + n) as int64.
  void copy(int64_t begin, int64_t n, int64_t* out) const;
  // The file that holds global token i, and its index there.
  std::pair<std::string, int64_t> locate(int64_t i) const;
  // Throws, naming `field`, the file, the token and the id, when a token of [begin, begin + n)
  // (clipped to the data) is not below vocab_size.
  void check_ids(int64_t begin, int64_t n, int64_t vocab_size, const std::string& field) const;

 private:
  struct Shard;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int64_t> starts_;  // first global token of each shard
  int64_t total_ = 0;
};

// Where a loader is: resumable from a checkpoint.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t step = 0;  // global batches taken in this epoch
};

// Samples are the windows [k*T, k*T + T + 1) of the stream (inputs and next-token targets).
// Each epoch visits them in a shuffled order (keyed by the seed and the epoch, the same on
// every rank); global batch s of an epoch takes `batch * dp_size` consecutive samples of that
// order and data-parallel rank r takes its `batch` of them. So every sample is seen exactly
// once per epoch across the ranks, and a resumed loader continues where it stopped.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const TokenDataset> data, int64_t batch, int64_t seq_len,
             int64_t dp_rank, int64_t dp_size, uint64_t seed, bool shuffle = true);

  struct Batch {
    at::Tensor inputs;   // [batch, seq_len] int64
    at::Tensor targets;  // [batch, seq_len] int64
  };
  // Throws naming the file and the id when a token is >= the vocab size (when one is set).
  Batch next();
  // Token ids must be below this (0: unchecked).
  void set_vocab_size(int64_t vocab_size) { vocab_size_ = vocab_size; }

  int64_t samples() const { return samples_; }
  int64_t steps_per_epoch() const { return samples_ / (batch_ * dp_size_); }
  LoaderPosition position() const { return pos_; }
  void seek(const LoaderPosition& pos);
  // The sample index at position `i` of epoch `epoch`'s order.
  int64_t sample_at(int64_t epoch, int64_t i) const;

 private:
  std::shared_ptr<const TokenDataset> data_;
  int64_t batch_, seq_len_, dp_rank_, dp_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t samples_;
  LoaderPosition pos_;
  int64_t vocab_size_ = 0;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace vescale::train
