// Full attention on one device, the reference of the context-parallel tests: q [B, H, T, D]
// against k, v [B, Hkv, T, D] (grouped-query heads repeated), causal or not, in q's dtype.
#pragma once
#include <ATen/ATen.h>

#include <cmath>

namespace vescale::testing {

inline at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 bool causal) {
  const int64_t rep = q.size(1) / k.size(1), T = q.size(2);
  auto kr = k.repeat_interleave(rep, 1), vr = v.repeat_interleave(rep, 1);
  auto s = at::matmul(q, kr.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (causal) s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
  return at::matmul(at::softmax(s, -1), vr);
}

}  // namespace vescale::testing
