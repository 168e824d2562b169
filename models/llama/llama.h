// LLaMA-3 in plain libtorch: the transformer trunk (transformer.h: RMSNorm pre-norm blocks,
// grouped-query attention with RoPE, theta and the "llama3" frequency scaling, optional tied
// embeddings) with a SwiGLU feed-forward in every block. Knows nothing about parallelism.
//
// Parameter names (Meta / TorchTitan layout) and their Hugging Face LlamaForCausalLM names:
//   tok_embeddings.weight                 model.embed_tokens.weight
//   layers.{i}.attention_norm.weight      model.layers.{i}.input_layernorm.weight
//   layers.{i}.attention.wq.weight        model.layers.{i}.self_attn.q_proj.weight
//   layers.{i}.attention.wk.weight        model.layers.{i}.self_attn.k_proj.weight
//   layers.{i}.attention.wv.weight        model.layers.{i}.self_attn.v_proj.weight
//   layers.{i}.attention.wo.weight        model.layers.{i}.self_attn.o_proj.weight
//   layers.{i}.ffn_norm.weight            model.layers.{i}.post_attention_layernorm.weight
//   layers.{i}.feed_forward.w1.weight     model.layers.{i}.mlp.gate_proj.weight
//   layers.{i}.feed_forward.w2.weight     model.layers.{i}.mlp.down_proj.weight
//   layers.{i}.feed_forward.w3.weight     model.layers.{i}.mlp.up_proj.weight
//   norm.weight                           model.norm.weight
//   output.weight                         lm_head.weight (absent when tie_embeddings)
// Linear weights are [out, in]; no biases. Buffers (not parameters): rope_cos, rope_sin.
//
// RoPE uses the rotate-half convention (pairs (j, j + head_dim/2)), as Hugging Face does, so
// HF weights load unchanged. Meta's original checkpoints rotate interleaved pairs (2j, 2j+1):
// importing those needs the usual permutation of wq and wk rows (HF's convert_llama_weights
// does the same), see models/shared/hugging_face.h.
#pragma once
#include <cstdint>

#include "vescale/models/llama/llama_options.h"
#include "vescale/models/llama/transformer.h"

namespace vescale::models {

// The published LLaMA-3 shapes (8B: 8.03B parameters; 70B: 70.55B).
LlamaOptions llama3_8b();
LlamaOptions llama3_70b();
// Parameter count from the options alone (no tensors), for dry runs and as a test oracle.
int64_t llama_parameter_count(const LlamaOptions& o);

struct LlamaImpl : TransformerImpl {
  explicit LlamaImpl(const LlamaOptions& o);
  // TorchTitan's init (TransformerImpl::init_trunk), the feed-forward's w1 N(0, 0.02) and w2, w3
  // N(0, 0.02 / sqrt(2 * n_layers)); run by the constructor, rerun by a framework after sharding.
  void init_weights();
  LlamaOptions options;
};
TORCH_MODULE(Llama);

}  // namespace vescale::models
