#!/usr/bin/env bash
# Runs bench/tp_step (eager DTensor, static eager, hand-written local-tensor TP) and
# bench/tp_step.py (PyTorch's Python parallelize_module) at TP=2 and TP=4 on Gloo, CPU, one
# thread per rank, and writes bench/results/tp_step.md.
# Knobs: TPS="2 4", TP_STEP_PLAN (plan file for the DTensor variants), TP_STEP_VARIANTS (subset, e.g. "eager,baseline"), TP_STEP_WARMUP, TP_STEP_ROUNDS, TP_STEP_PER_ROUND (timed steps = rounds x per_round).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
VENV=${VESCALE_VENV:-/opt/vescale/venv}
TPS=${TPS:-"2 4"}
export TP_STEP_WARMUP=${TP_STEP_WARMUP:-3} TP_STEP_ROUNDS=${TP_STEP_ROUNDS:-5} TP_STEP_PER_ROUND=${TP_STEP_PER_ROUND:-4}
out=$(mktemp -d)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $TPS; do
  "$BUILD_DIR/apps/vescale-run" --nproc-per-node "$n" -- "$BUILD_DIR/bench/tp_step" | sed 's/^\[rank 0\] //' | grep '^{' >> "$out/runs.jsonl"
  "$BUILD_DIR/apps/vescale-run" --nproc-per-node "$n" -- "$VENV/bin/python" bench/tp_step.py 2>/dev/null | sed 's/^\[rank 0\] //' | grep '^{' >> "$out/runs.jsonl"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
"$VENV/bin/python" - "$out/runs.jsonl" "$load_before" "$load_after" <<'PY'
import datetime, json, os, platform, sys
import torch
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["tp"], r["impl"]): r for r in rows}
tps = sorted({r["tp"] for r in rows})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
r0 = rows[0]
lines = [
    "# Tensor-parallel training step: DTensor vs hand-written TP vs PyTorch's Python TP",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores (shared with other jobs: load average {sys.argv[2]} before, "
    f"{sys.argv[3]} after); {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; "
    "Gloo on CPU, 1 thread per rank, launched by vescale-run.",
    f"Model: llama_tiny's shapes (vocab 256, dim 128, 4 layers, ffn 384) with 8 query / 4 kv heads (head_dim 16) so that "
    f"TP=4 splits whole kv heads; batch {r0['batch']} x seq {r0['seq']}, fp32, AdamW (per parameter). "
    "One step = zero_grad, forward, cross-entropy, backward, (grad reduce), optimizer step, loss to host.",
    f"Step time in ms: median over {r0['steps']} timed steps after {os.environ.get('TP_STEP_WARMUP', 3)} warm-up steps "
    "(each step starts after a barrier); the three C++ variants run in interleaved rounds in one process.",
    "",
    "- eager: `models::Llama` + `plan::parallelize` with `configs/plans/llama_tp.json` (DTensor dispatch on every op)",
    "- static: the same with `dtensor::set_static_eager(true)` (recorded dispatch replayed)",
    "- baseline: the same math on local shards, Megatron f/g operators, vocab-parallel embedding and cross-entropy (bench/tp_step.cpp)",
    "- PyTorch: `parallelize_module` (ColwiseParallel / RowwiseParallel, vocab-parallel embedding, `loss_parallel`) on the same model in Python (bench/tp_step.py)",
    "",
    "| TP | baseline | eager | static | PyTorch | eager / baseline | static / baseline | PyTorch / eager | PyTorch / static | baseline first-loss rel diff vs eager |",
    "|---|---|---|---|---|---|---|---|---|---|",
]
fmt = lambda r: f"{r['median_ms']:.1f} ({r['min_ms']:.1f}-{r['max_ms']:.1f})" if r else "n/a"
ratio = lambda a, b: f"{a['median_ms'] / b['median_ms']:.2f}x" if a and b else "n/a"
for tp in tps:
    b, e, s, p = (by.get((tp, k)) for k in ("baseline", "eager", "static", "pytorch"))
    diff = f"{b['first_loss_rel_diff_vs_eager']:.1e}" if b else "n/a"
    lines.append(f"| {tp} | {fmt(b)} | {fmt(e)} | {fmt(s)} | {fmt(p)} | {ratio(e, b)} | {ratio(s, b)} | {ratio(p, e)} | {ratio(p, s)} | {diff} |")
lines += ["", "Process CPU time per step (rank 0, ms, median; less sensitive than wall time to the other jobs on the machine, "
          "includes Gloo's threads), and DTensor dispatcher work per step:", "",
          "| TP | baseline CPU | eager CPU | static CPU | PyTorch CPU | eager / baseline (CPU) | static / baseline (CPU) | PyTorch / static (CPU) | DTensor op calls | in-op redistributions |",
          "|---|---|---|---|---|---|---|---|---|---|"]
cpu = lambda r: f"{r['cpu_ms']:.1f}" if r else "n/a"
cratio = lambda a, b: f"{a['cpu_ms'] / b['cpu_ms']:.2f}x" if a and b else "n/a"
for tp in tps:
    b, e, s, p = (by.get((tp, k)) for k in ("baseline", "eager", "static", "pytorch"))
    lines.append(f"| {tp} | {cpu(b)} | {cpu(e)} | {cpu(s)} | {cpu(p)} | {cratio(e, b)} | {cratio(s, b)} | {cratio(p, s)} | "
                 f"{e['dispatch_calls_per_step'] if e else 'n/a'} | {e['redistributions_per_step'] if e else 'n/a'} |")
lines += ["", "Cells: median (min-max) ms. Targets (issue 6): eager <= 1.10x baseline, static <= 1.02x, faster than PyTorch's Python TP.",
          "First losses: " + ", ".join(f"TP={r['tp']} {r['impl']} {r['first_loss']:.6f}" for r in rows) +
          " (PyTorch draws its own init from torch's RNG, so only its magnitude is comparable).",
          "",
          "In-op redistributions per step at TP=2 (logged with a temporary print in the dispatcher; op, argument, from -> to, count):",
          "`mm` a1 Shard(1)->Replicate 21, `pow` a0 Partial->Replicate 18, `mul` a0 Partial->Replicate 18, `mul` a1 Partial->Replicate 18,",
          "`cat` a0 Partial->Replicate 16, `mm` a0 Replicate->Shard(1) 13, `add` a0 Partial->Replicate 9, `add` a1 Partial->Replicate 8,",
          "`mm` a1 Shard(0)->Replicate 8, `mm` a0 Partial->Replicate 8, `view` a0 Shard(1)->Replicate 4, `silu` a0 Partial->Replicate 4,",
          "`silu_backward` a1 Partial->Shard(2) 4, `mul` a1 Replicate->Shard(2) 4, `mul` a1 Partial->Shard(2) 4,",
          "`_softmax_backward_data` a0 Partial->Replicate 4, `_log_softmax` a0 Partial->Replicate 1 (162; the baseline makes 21 all-reduces).",
          "Reading (not yet traced into the rules): the residual stream stays Partial (the vocab-parallel embedding's output, plus",
          "row-parallel outputs added while Partial), so every RMSNorm reduces its input once per consuming op (`pow`, `mul`) in forward",
          "and again in backward on the saved Partial tensor, where Megatron reduces once per block; and `mm` gathers Shard(1) operands",
          "(21 = the 20 column-parallel linears + the LM head) in some direction of the step instead of keeping the shards.",
          "`scaled_dot_product_attention` takes its decomposed math path (no rule for CPU flash attention); the baseline calls the fused",
          "kernel. Static eager replays the decisions but keeps every collective, so it cannot close a gap made of collectives.",
          "4 ranks on 2 shared cores are heavily oversubscribed: every collective waits until all 4 processes are scheduled, so TP=4",
          "wall times are noisy and mostly measure the number of collectives.",
          "",
          "Open discrepancy: with any `forward` entry in the plan (even a no-op `norm` output Replicate, or the shipped",
          "`llama_tp_sp.json`), eager's first loss here is 2.923372 instead of 6.091362 (which `llama_tp.json` and the baseline give),",
          "e.g. `build/apps/vescale-run --nproc-per-node 2 -- env TP_STEP_PLAN=configs/plans/llama_tp_sp.json build/bench/tp_step`.",
          "tests/plan's single-device equivalence for the same plan passes; this bench differs in building two models with one plan",
          "in one process and in T (64) < max_seq_len (128). At world 1 all variants agree (6.091363). Not yet explained; plans with forward entries are not timed here.",
          "", "Reproduce: `bench/tp_step.sh` (TPS, TP_STEP_WARMUP, TP_STEP_ROUNDS, TP_STEP_PER_ROUND)."]
os.makedirs("bench/results", exist_ok=True)
open("bench/results/tp_step.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
