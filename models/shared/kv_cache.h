// The keys and values a generation has already computed, per layer, so that each new token
// attends to the earlier ones without recomputing them. It is the optional last argument of the
// models' forward (Model::forward_cached); training never passes one.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace vescale::models {

class KVCache {
 public:
  // Room for `capacity` positions (the model's max_seq_len) in each of `n_layers` layers; the
  // tensors are allocated by the first append, with its batch, heads, head dim, dtype and device.
  KVCache(int64_t n_layers, int64_t capacity);

  // Positions already cached: the position of the next token the model sees.
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }

  // Stores layer `layer`'s keys and values of this forward's positions [length, length + T)
  // ([B, H, T, D] each) and returns all cached ones, [B, H, length + T, D].
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // After every layer appended: the forward's T positions count as cached.
  void advance(int64_t T);
  // Forgets every position (keeps the storage) for a new sequence.
  void clear() { length_ = 0; }

 private:
  std::vector<at::Tensor> k_, v_;
  int64_t length_ = 0, capacity_;
};

// softmax(q k^T / sqrt(D)) v for queries at positions [offset, offset + T) ([B, H, T, D]) over
// keys and values of positions [0, offset + T) ([B, H, offset + T, D]): a query at position p
// sees the keys at positions <= p.
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t offset);

}  // namespace vescale::models
