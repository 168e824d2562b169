// Mixtral in plain libtorch: LLaMA's trunk (llama/transformer.h) with every block's SwiGLU
// replaced by a sparse mixture of experts (shared/moe.h): each token goes to its top-k experts
// by router score (softmax over all experts, top-k, renormalized: the same as a softmax over the
// k chosen logits); dropless unless moe.capacity_factor is set.
//
// Parameter names and their Hugging Face MixtralForCausalLM names (as in saved checkpoints):
//   tok_embeddings.weight                    model.embed_tokens.weight
//   layers.{i}.attention_norm.weight         model.layers.{i}.input_layernorm.weight
//   layers.{i}.attention.w{q,k,v,o}.weight   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
//   layers.{i}.ffn_norm.weight               model.layers.{i}.post_attention_layernorm.weight
//   layers.{i}.feed_forward.router.weight    model.layers.{i}.block_sparse_moe.gate.weight [E, dim]
//   layers.{i}.feed_forward.experts.w1       ...block_sparse_moe.experts.{e}.w1.weight, stacked
//                                            over e [E, ffn, dim]
//   layers.{i}.feed_forward.experts.w2       ... experts.{e}.w2.weight, stacked  [E, dim, ffn]
//   layers.{i}.feed_forward.experts.w3       ... experts.{e}.w3.weight, stacked  [E, ffn, dim]
//   norm.weight                              model.norm.weight
//   output.weight                            lm_head.weight
// (transformers 5 fuses w1 and w3 into gate_up_proj in memory but saves the per-expert names
// above.)
#pragma once
#include <cstdint>

#include "vescale/models/mixtral/mixtral_options.h"
#include "vescale/models/shared/moe.h"

namespace vescale::models {

MixtralOptions mixtral_8x7b();  // 46,702,792,704 parameters
int64_t mixtral_parameter_count(const MixtralOptions& o);

struct MixtralImpl : MoETransformerImpl {
  explicit MixtralImpl(const MixtralOptions& o);
  MixtralOptions options;
};
TORCH_MODULE(Mixtral);

}  // namespace vescale::models
