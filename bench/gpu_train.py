# The training step of bench/gpu_train.sh in a PyTorch Python eager loop, for the ratio
# vescale / PyTorch on the same GPU: transformers' LlamaForCausalLM built from a LlamaConfig of
# the config's shape, fp32 master weights with bf16 autocast, cross-entropy in fp32, backward,
# clip_grad_norm_, torch.optim.AdamW (fused on CUDA), one .item() per step (as vescale-train).
#   python bench/gpu_train.py CONFIG [--steps N] [--warmup W] [--ac] [--json PATH] [k=v ...]
# k=v overrides model./train. fields (train.batch_size=4). --dry-run: on the CPU, a tiny model
# of the same family for one step, to check that this transformers/torch can build and step it.
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def tiny(m, t):
    # Same family and options (GQA, tied embeddings, llama3 RoPE scaling), a CPU-sized shape.
    m.update(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, max_seq_len=64)
    t.update(batch_size=2, seq_len=32)


def llama_config(m):
    from transformers import LlamaConfig

    rope = {"rope_type": "default", "rope_theta": m["rope_theta"]}
    if m.get("rope_scaling"):
        rope.update(rope_type="llama3", **m["rope_scaling"])
    kw = dict(vocab_size=m["vocab_size"], hidden_size=m["dim"], intermediate_size=m["ffn_dim"],
              num_hidden_layers=m["n_layers"], num_attention_heads=m["n_heads"],
              num_key_value_heads=m.get("n_kv_heads", m["n_heads"]), rms_norm_eps=m.get("norm_eps", 1e-5),
              # Past RoPE scaling's original length, as transformers asks (the llama3 frequencies
              # don't depend on it): original x factor, 262144 for Llama 3.2.
              max_position_embeddings=max(m["max_seq_len"], int(rope.get("original_max_position_embeddings", 0)
                                                                * rope.get("factor", 1))),
              use_cache=False, tie_word_embeddings=m.get("tie_embeddings", False),
              attention_bias=False, mlp_bias=False, attention_dropout=0.0)
    try:  # transformers >= 5: one rope_parameters dict
        return LlamaConfig(rope_parameters=rope, **kw)
    except TypeError:  # 4.x: rope_theta and rope_scaling apart
        theta = rope.pop("rope_theta")
        return LlamaConfig(rope_theta=theta, rope_scaling=rope if rope["rope_type"] != "default" else None, **kw)


def flops_per_token(m, seq):
    # As vescale's train::flops_per_token: 6 x the matmul parameters (the tied head once) plus
    # attention's 12 L d T.
    d, L, hd = m["dim"], m["n_layers"], m["dim"] // m["n_heads"]
    kv = m.get("n_kv_heads", m["n_heads"]) * hd
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * m["ffn_dim"]
    return 6.0 * (L * per_layer + m["vocab_size"] * d) + 12.0 * L * d * seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("sets", nargs="*", help="model.x=v / train.x=v overrides")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the medians")
    ap.add_argument("--ac", action="store_true", help="activation checkpointing (HF gradient checkpointing)")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    for kv in a.sets:
        k, v = kv.split("=", 1)
        sec, key = k.split(".", 1)
        cfg[sec][key] = json.loads(v)
    m, t = cfg["model"], cfg["train"]
    assert m["type"] == "llama", "gpu_train.py builds LLaMA configs only"
    if a.dry_run:
        tiny(m, t)
        a.steps, a.warmup = 1, 0
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.dry_run else "cpu")
    if dev.type == "cpu" and not a.dry_run:
        sys.exit("gpu_train.py: no CUDA device is visible (use --dry-run to check it on the CPU)")
    torch.manual_seed(t.get("seed", 1234))
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # as libtorch's default in vescale-train
    from transformers import LlamaForCausalLM
    import transformers

    t0 = time.perf_counter()
    conf = llama_config(m)
    conf._attn_implementation = "sdpa"  # flash/cuDNN SDPA, as vescale's causal attention
    with dev:  # initialized on the device: seconds for 1.24B, where the CPU takes a minute
        model = LlamaForCausalLM(conf)  # fp32 master weights
    if a.ac:  # transformers 5.24 renamed it; 5.17 (the GPU image's) has the old name only
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=tuple(t.get("betas", [0.9, 0.95])), eps=t.get("eps", 1e-8),
                            fused=dev.type == "cuda")
    B, T, V = t["batch_size"], t["seq_len"], m["vocab_size"]
    build_s = time.perf_counter() - t0
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    ms, losses = [], []
    for s in range(a.steps):
        # Synthetic ids below 256, as the byte corpus vescale-train reads (compute doesn't care).
        data = torch.randint(256, (B, T + 1), device=dev)
        x, y = data[:, :-1], data[:, 1:]
        sync()
        t1 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.get("grad_clip", 1.0), foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the host read ends the step, as in vescale-train
        sync()
        ms.append((time.perf_counter() - t1) * 1000.0)
        print(json.dumps({"step": s + 1, "ms": round(ms[-1], 3), "loss": losses[-1]}), flush=True)
    kept = ms[a.warmup:] or ms
    med = statistics.median(kept)
    tok_s = B * T / (med / 1000.0)
    fpt = flops_per_token(m, T)
    summary = {
        "bench": "gpu_train_pytorch", "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "dry_run": a.dry_run, "torch": torch.__version__, "transformers": transformers.__version__,
        "params": n_params, "batch_size": B, "seq_len": T, "activation_checkpointing": a.ac,
        "steps": a.steps, "warmup": a.warmup, "build_s": round(build_s, 2),
        "step_ms_median": round(med, 3), "tokens_per_s": round(tok_s, 1),
        "tflops_per_s": round(fpt * tok_s / 1e12, 2), "mfu_vs_989": round(fpt * tok_s / 989e12, 4),
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if dev.type == "cuda" else None,
        "step_ms": [round(v, 3) for v in ms], "losses": losses,
    }
    print(json.dumps({k: v for k, v in summary.items() if k not in ("step_ms", "losses")}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
