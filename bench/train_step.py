# The same training step as bench/train_step.cpp in PyTorch Python: a GPT-2 with the same
# dims and ops (LayerNorm, fused qkv Linear, causal SDPA, tanh GELU, tied head), cross-entropy,
# backward, clip_grad_norm_, torch.optim.AdamW with nanoGPT's decay groups, one .item() per
# step (as ours). CPU, fp32, 1 thread. Prints one JSON line per step.
#   python bench/train_step.py CONFIG STEPS [k=v ...]   (model/train fields of the config)
# VESCALE_PROFILE=1: profile the steps after the first two and print torch.profiler's table
# (self CPU time per op) to stderr, to compare with bench/train_step.cpp's.
import json
import math
import os
import sys
import time

import numpy as np  # noqa: F401  (silences torch's numpy warning; matplotlib brings it)
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, 2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        c = m["n_embd"]
        self.wte, self.wpe = nn.Embedding(m["vocab_size"], c), nn.Embedding(m["n_positions"], c)
        self.h = nn.ModuleList(Block(c, m["n_head"]) for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(c)
        # GPT-2's init, as models::GPT: N(0, 0.02), residual projections / sqrt(2 L), zero biases.
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * m["n_layer"]) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    cfg = json.load(open(sys.argv[1]))
    steps = int(sys.argv[2])
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        sec, key = k.split(".")
        cfg[sec][key] = json.loads(v)
    m, t = cfg["model"], cfg["train"]
    torch.set_num_threads(1)
    torch.manual_seed(t.get("seed", 1234))
    model = GPT(m)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=tuple(t.get("betas", [0.9, 0.95])), eps=t.get("eps", 1e-8))
    B, T, V = t["batch_size"], t["seq_len"], m["vocab_size"]
    data = torch.randint(V, (steps, B, T + 1))
    profiler = None
    for s in range(steps):
        if os.environ.get("VESCALE_PROFILE") and s == 2:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        start, cpu_start = time.perf_counter(), time.thread_time()
        x, y = data[s, :, :-1], data[s, :, 1:]
        for g in opt.param_groups:
            g["lr"] = t["lr"] * min(1.0, (s + 1) / max(1, t.get("warmup_steps", 0)))
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, t.get("grad_clip", 1.0))
        loss_v, norm_v = loss.item(), norm.item()
        assert math.isfinite(loss_v) and math.isfinite(norm_v)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms, cpu_ms = (time.perf_counter() - start) * 1e3, (time.thread_time() - cpu_start) * 1e3
        print(json.dumps({"impl": "pytorch", "step": s, "ms": round(ms, 3), "cpu_ms": round(cpu_ms, 3),
                          "loss": round(loss_v, 4)}), flush=True)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        print(f"(totals over {steps - 2} steps)\n{table}", file=sys.stderr)


if __name__ == "__main__":
    main()
