# The PyTorch side of bench/tp_step: the same tiny LLaMA (shapes as bench/tp_step.cpp) in plain
# torch.nn, tensor-parallel through PyTorch's Python parallelize_module: ColwiseParallel on
# wq/wk/wv/w1/w3, RowwiseParallel on wo/w2, a vocab-parallel embedding (RowwiseParallel) and a
# vocab-sharded LM head with loss_parallel. Gloo on CPU, one thread per rank, launched by
# vescale-run (which sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT like torchrun).
# Rank 0 prints one JSON line.
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, FFN, EPS, THETA, MAX_SEQ = 256, 128, 4, 8, 4, 384, 1e-5, 10000.0, 128
# configs/llama_tiny.json's training step unless TP_STEP_BATCH / TP_STEP_SEQ say otherwise (as bench/tp_step.cpp).
BATCH, SEQ = int(os.environ.get("TP_STEP_BATCH", 16)), int(os.environ.get("TP_STEP_SEQ", 128))
LR, ADAM_EPS, WD = 1e-3, 1e-6, 0.1
HEAD_DIM = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        heads = lambda t: t.view(B, T, -1, HEAD_DIM).transpose(1, 2)  # -1: local heads under TP
        q, k, v = rope(heads(self.wq(x)), cos, sin), rope(heads(self.wk(x)), cos, sin), heads(self.wv(x))
        rep = HEADS // KV_HEADS
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(DIM), Attention()
        self.ffn_norm, self.feed_forward = RMSNorm(DIM), FeedForward()

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
        angles = torch.outer(torch.arange(MAX_SEQ).float(), inv_freq)
        emb = torch.cat([angles, angles], -1)
        self.register_buffer("rope_cos", emb.cos())
        self.register_buffer("rope_sin", emb.sin())
        # The same init distributions as models::Llama (TorchTitan's).
        with torch.no_grad():
            std_resid = 0.02 / (2 * LAYERS) ** 0.5
            nn.init.normal_(self.tok_embeddings.weight, 0.0, 1.0)
            for b in self.layers:
                for w in (b.attention.wq, b.attention.wk, b.attention.wv, b.feed_forward.w1):
                    nn.init.normal_(w.weight, 0.0, 0.02)
                for w in (b.attention.wo, b.feed_forward.w2, b.feed_forward.w3):
                    nn.init.normal_(w.weight, 0.0, std_resid)
            nn.init.normal_(self.output.weight, 0.0, DIM ** -0.5)

    def forward(self, tokens):
        T = tokens.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))


def tp_plan():
    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    for i in range(LAYERS):
        for name in ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"):
            plan[f"layers.{i}.{name}"] = ColwiseParallel()
        for name in ("attention.wo", "feed_forward.w2"):
            plan[f"layers.{i}.{name}"] = RowwiseParallel()
    return plan


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(VOCAB, (BATCH, SEQ + 1), generator=g)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    torch.manual_seed(1234)
    model = parallelize_module(Llama(), mesh, tp_plan())
    # Per-parameter AdamW (foreach=False): fused=True rejects DTensor parameters with plain step
    # counters, and foreach=True the mix of DTensor and plain parameters that parallelize_module
    # leaves (torch 2.12). The C++ side runs vescale::optim::AdamW's fused kernel.
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS, weight_decay=WD, foreach=False)
    warmup = int(os.environ.get("TP_STEP_WARMUP", 3))
    steps = int(os.environ.get("TP_STEP_ROUNDS", 5)) * int(os.environ.get("TP_STEP_PER_ROUND", 4))
    times, cpu_times, first_loss = [], [], None
    for s in range(warmup + steps):
        full = batch(s)
        x, y = full[:, :SEQ], full[:, 1:]
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        logits = model(x)
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(0, 1))
            loss.backward()
        opt.step()
        value = (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()
        ms, cpu_ms = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
        if s == 0:
            first_loss = value
        if s >= warmup:
            times.append(ms)
            cpu_times.append(cpu_ms)
    if dist.get_rank() == 0:
        print(json.dumps({"impl": "pytorch", "tp": world, "median_ms": statistics.median(times),
                          "min_ms": min(times), "max_ms": max(times), "cpu_ms": statistics.median(cpu_times), "steps": len(times),
                          "first_loss": first_loss, "batch": BATCH, "seq": SEQ}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
