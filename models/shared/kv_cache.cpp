#include "vescale/models/shared/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace vescale::models {

KVCache::KVCache(int64_t n_layers, int64_t capacity)
    : k_(static_cast<size_t>(n_layers)), v_(static_cast<size_t>(n_layers)), capacity_(capacity) {
  TORCH_CHECK(n_layers > 0 && capacity > 0, "KVCache: needs layers and capacity (got ", n_layers,
              ", ", capacity, ")");
}

std::pair<at::Tensor, at::Tensor> KVCache::append(int64_t layer, const at::Tensor& k,
                                                  const at::Tensor& v) {
  TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(k_.size()), "KVCache: layer ", layer,
              " of ", k_.size());
  const int64_t T = k.size(2);
  TORCH_CHECK(length_ + T <= capacity_, "KVCache: ", length_, " cached + ", T,
              " new positions exceed the capacity ", capacity_, " (the model's max_seq_len)");
  auto& ck = k_[static_cast<size_t>(layer)];
  auto& cv = v_[static_cast<size_t>(layer)];
  if (!ck.defined() || ck.size(0) != k.size(0) || ck.size(1) != k.size(1)) {
    ck = at::empty({k.size(0), k.size(1), capacity_, k.size(3)}, k.options());
    cv = at::empty({v.size(0), v.size(1), capacity_, v.size(3)}, v.options());
  }
  ck.narrow(2, length_, T).copy_(k);
  cv.narrow(2, length_, T).copy_(v);
  return {ck.narrow(2, 0, length_ + T), cv.narrow(2, 0, length_ + T)};
}

void KVCache::advance(int64_t T) {
  TORCH_CHECK(length_ + T <= capacity_, "KVCache: advance past the capacity ", capacity_);
  length_ += T;
}

at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t offset) {
  const int64_t T = q.size(2), S = k.size(2);
  TORCH_CHECK(S == offset + T, "cached_attention: ", S, " keys for queries at [", offset, ", ",
              offset + T, ")");
  if (T == 1) return at::scaled_dot_product_attention(q, k, v);  // the newest token sees all
  // Query i (position offset + i) sees key j iff j <= offset + i.
  auto rows = at::arange(offset, offset + T, q.options().dtype(at::kLong)).unsqueeze(1);
  auto cols = at::arange(S, q.options().dtype(at::kLong)).unsqueeze(0);
  return at::scaled_dot_product_attention(q, k, v, cols <= rows);
}

}  // namespace vescale::models
