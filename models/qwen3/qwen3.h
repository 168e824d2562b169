// Qwen3 in plain libtorch, dense and MoE: LLaMA's trunk (llama/transformer.h) with an RMSNorm
// over each head of q and k before RoPE, an explicit head width, optional attention biases
// (q, k, v and o, as transformers' Qwen3 with attention_bias), and either LLaMA's SwiGLU or Qwen3-MoE's routed experts (shared/moe.h: top-k by
// router probability, renormalized when normalize_top_k, no shared expert).
//
// Parameter names and their Hugging Face Qwen3ForCausalLM / Qwen3MoeForCausalLM names: the
// trunk's as LLaMA's (llama.h), and
//   layers.{i}.attention.q_norm.weight       model.layers.{i}.self_attn.q_norm.weight   [head_dim]
//   layers.{i}.attention.k_norm.weight       model.layers.{i}.self_attn.k_norm.weight
//   layers.{i}.attention.w{q,k,v,o}.bias     model.layers.{i}.self_attn.{q,k,v,o}_proj.bias (with
//                                            attention_bias)
//   Qwen3-MoE:
//   layers.{i}.feed_forward.router.weight    model.layers.{i}.mlp.gate.weight           [E, dim]
//   layers.{i}.feed_forward.experts.w1       model.layers.{i}.mlp.experts.{e}.gate_proj.weight,
//                                            stacked over e [E, ffn, dim]
//   layers.{i}.feed_forward.experts.w2       ... experts.{e}.down_proj.weight [E, dim, ffn]
//   layers.{i}.feed_forward.experts.w3       ... experts.{e}.up_proj.weight   [E, ffn, dim]
// (transformers 5 fuses gate and up into gate_up_proj in memory; save_pretrained writes the
// per-expert names above.)
#pragma once
#include <cstdint>

#include "vescale/models/llama/transformer.h"
#include "vescale/models/qwen3/qwen3_options.h"
#include "vescale/models/shared/moe.h"

namespace vescale::models {

Qwen3Options qwen3_8b();          // 8,190,735,360 parameters
Qwen3MoeOptions qwen3_30b_a3b();  // 30,532,122,624 parameters, 3.3B active per token
int64_t qwen3_parameter_count(const Qwen3Options& o);
int64_t qwen3_moe_parameter_count(const Qwen3MoeOptions& o);

// The trunk options of a Qwen3: qk-norm on, its head width and biases.
TrunkOptions qwen3_trunk(const Qwen3Options& o);

struct Qwen3Impl : TransformerImpl {
  explicit Qwen3Impl(const Qwen3Options& o);
  // LLaMA's init (llama.h) for the same shapes; the q/k norms 1, the biases 0.
  void init_weights();
  Qwen3Options options;
};
TORCH_MODULE(Qwen3);

struct Qwen3MoeImpl : MoETransformerImpl {
  explicit Qwen3MoeImpl(const Qwen3MoeOptions& o);
  Qwen3MoeOptions options;
};
TORCH_MODULE(Qwen3Moe);

}  // namespace vescale::models
