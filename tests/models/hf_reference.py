#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers for the C++ cross-check (test only).

Builds tiny random LlamaForCausalLM (GQA, llama3 rope scaling), MixtralForCausalLM,
GPT2LMHeadModel, Qwen3ForCausalLM (head_dim apart from the width, q/k/v biases, tied head) and
Qwen3MoeForCausalLM in fp32 with fixed seeds, saves each with save_pretrained (model.safetensors +
config.json) and, in reference.safetensors, fixed input tokens with HF's logits and loss
(labels = tokens, shifted inside HF), for Mixtral and Qwen3-MoE their load-balancing aux loss, and the
tokens of a greedy model.generate from a fixed prompt (gen_prompt, gen_greedy).
Also writes dtypes.safetensors (one tensor per safetensors dtype, values from a formula the
C++ test recomputes), and with --check-cpp FILE verifies a file written by our C++ writer.

usage: hf_reference.py --out DIR          (or: hf_reference.py --check-cpp FILE)
"""
import argparse
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in ctest logs

import torch
from safetensors.torch import load_file, save_file


GEN_TOKENS = 20


def tokens_for(vocab, batch=2, seq=12, seed=1234):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)


def save_reference(model, out_dir, vocab, extra=None):
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokens = tokens_for(vocab)
    with torch.no_grad():
        out = model(input_ids=tokens, labels=tokens)
    ref = {"tokens": tokens, "logits": out.logits.contiguous(), "loss": out.loss.reshape(())}
    ref.update(extra(tokens) if extra else {})
    # Greedy generation (transformers' generate with its KV cache), never stopping early: the
    # C++ generate must give the same tokens.
    prompt = tokens_for(vocab, batch=1, seq=5, seed=99)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=GEN_TOKENS, do_sample=False)
    ref["gen_prompt"] = prompt.reshape(-1).contiguous()
    ref["gen_greedy"] = gen[0, prompt.shape[1]:].contiguous()
    save_file(ref, os.path.join(out_dir, "reference.safetensors"))


def make_llama(out_dir):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        attention_bias=False, mlp_bias=False, torch_dtype="float32",
        initializer_range=0.2)  # wide weights: varied greedy tokens, not one repeated
    model = LlamaForCausalLM(cfg).float()
    # Random norm weights too, so a norm wired to the wrong place shows.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    save_reference(model, out_dir, cfg.vocab_size)


def save_moe_reference(model, out_dir, vocab, router_key):
    """A mixture-of-experts model's reference, with random norms and routers that prefer some
    experts (so routing matters), and the raw load-balancing loss (HF adds coef x it to the loss)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
            if router_key in n:
                p.normal_(0.0, 0.5)

    def aux(tokens):
        with torch.no_grad():
            o = model(input_ids=tokens, output_router_logits=True)
        return {"aux_loss": o.aux_loss.reshape(()).float()}

    save_reference(model, out_dir, vocab, aux)


def make_mixtral(out_dir):
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=1000000.0,
        router_jitter_noise=0.0, tie_word_embeddings=False, torch_dtype="float32")
    save_moe_reference(MixtralForCausalLM(cfg).float(), out_dir, cfg.vocab_size, "gate.weight")


def make_qwen3(out_dir):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    # head_dim 24 with 4 heads over hidden 64: Qwen's heads need not tile the width; biases on
    # q, k, v (Qwen2's) and a tied head, so every extra of the family is exercised.
    cfg = Qwen3Config(
        vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=24, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=True,
        torch_dtype="float32", initializer_range=0.2)
    model = Qwen3ForCausalLM(cfg).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
            elif n.endswith(".bias"):
                p.normal_(0.0, 0.1)
    save_reference(model, out_dir, cfg.vocab_size)


def make_qwen3_moe(out_dir):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        num_experts=6, num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=64,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        router_aux_loss_coef=0.001, torch_dtype="float32", initializer_range=0.2)
    save_moe_reference(Qwen3MoeForCausalLM(cfg).float(), out_dir, cfg.vocab_size, "mlp.gate.weight")


def make_gpt2(out_dir):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                     layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     initializer_range=0.5)
    model = GPT2LMHeadModel(cfg).float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "ln_" in n:
                p.uniform_(0.5, 1.5)
            elif n.endswith(".bias"):
                p.normal_(0.0, 0.1)
    save_reference(model, out_dir, cfg.vocab_size)


# dtype name -> (torch dtype, values for numel n): the C++ test computes the same formulas.
def dtype_tensors():
    def ramp(n):
        return torch.arange(n, dtype=torch.float64)

    return {
        "F64": (ramp(6) * 0.25 - 0.5).reshape(2, 3),
        "F32": (ramp(6) * 0.25 - 0.5).float().reshape(3, 2),
        "F16": (ramp(4) * 0.25 - 0.5).half(),
        "BF16": (ramp(4) * 0.25 - 0.5).bfloat16().reshape(2, 2),
        "I64": (torch.arange(5, dtype=torch.int64) - 2) * 1000000000000,
        "I32": (torch.arange(5, dtype=torch.int32) - 2) * 100000,
        "I16": (torch.arange(5, dtype=torch.int16) - 2) * 1000,
        "I8": torch.arange(5, dtype=torch.int8) - 2,
        "U8": torch.arange(5, dtype=torch.uint8) * 50,
        "BOOL": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
    }


def check_cpp(path):
    got = load_file(path)
    want = dtype_tensors()
    bad = [k for k in want if k not in got or got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k])]
    extra = sorted(set(got) - set(want))
    if bad or extra:
        print(f"{path}: mismatched {bad}, unexpected {extra}", file=sys.stderr)
        return 1
    print(f"{path}: {len(got)} tensors read by safetensors {__import__('safetensors').__version__} match")
    return 0


def check_export(root, reference):
    """vescale-convert's folders under root load in transformers: each trained export gives the
    logits our model gave (ours.safetensors) within 1e-5; each round trip (HF -> ours -> HF) holds
    the original tensors bit for bit and gives the original reference logits."""
    import glob
    import json
    from transformers import AutoModelForCausalLM
    failed = 0
    for d in sorted(glob.glob(os.path.join(root, "*"))):
        name = os.path.basename(d)
        model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
        if name.startswith("roundtrip_"):
            orig = os.path.join(reference, name[len("roundtrip_"):])
            want = load_file(os.path.join(orig, "model.safetensors"))
            got = {}
            index = os.path.join(d, "model.safetensors.index.json")
            files = set(json.load(open(index))["weight_map"].values()) if os.path.exists(index) else {"model.safetensors"}
            for f in files:
                got.update(load_file(os.path.join(d, f)))
            bitwise = set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
            ref = load_file(os.path.join(orig, "reference.safetensors"))
        else:
            bitwise = True
            ref = load_file(os.path.join(d, "ours.safetensors"))
        with torch.no_grad():
            logits = model(ref["tokens"]).logits
        diff = (logits - ref["logits"]).abs().max().item()
        ok = bitwise and diff <= 1e-5
        failed += not ok
        print(f"{name}: transformers {type(model).__name__}, max |logits diff| {diff:.3g}"
              + ("" if bitwise else ", tensors DIFFER from the original") + ("" if ok else "  FAILED"))
    if not glob.glob(os.path.join(root, "*")):
        print(f"{root}: no exported folders", file=sys.stderr)
        return 1
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check-cpp")
    ap.add_argument("--check-export", help="folder of vescale-convert outputs")
    ap.add_argument("--reference", help="with --check-export: the --out folder of this script")
    a = ap.parse_args()
    if a.check_cpp:
        return check_cpp(a.check_cpp)
    if a.check_export:
        return check_export(a.check_export, a.reference)
    torch.set_default_dtype(torch.float32)
    for name, make in (("llama", make_llama), ("mixtral", make_mixtral), ("gpt2", make_gpt2),
                       ("qwen3", make_qwen3), ("qwen3_moe", make_qwen3_moe)):
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        make(d)
    save_file({k: v.contiguous() for k, v in dtype_tensors().items()}, os.path.join(a.out, "dtypes.safetensors"))
    import transformers
    print(f"hf_reference: wrote {a.out} with transformers {transformers.__version__}, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
