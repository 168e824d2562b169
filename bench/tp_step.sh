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
allrows = [json.loads(l) for l in open(sys.argv[1])]
moves = {r["tp"]: r["moves"] for r in allrows if r["impl"].endswith("_redistributions")}
rows = [r for r in allrows if not r["impl"].endswith("_redistributions")]
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
    f"TP=4 splits whole kv heads; batch {r0['batch']} x seq {r0['seq']}, fp32, AdamW (C++: fused kernel, DTensors on their local shards; PyTorch: per parameter). "
    "One step = zero_grad, forward, cross-entropy, backward, (grad reduce), optimizer step, loss to host.",
    f"Step time in ms: median over {r0['steps']} timed steps after {os.environ.get('TP_STEP_WARMUP', 3)} warm-up steps "
    "(each step starts after a barrier); the three C++ variants run in interleaved rounds in one process.",
    "",
    f"- eager: `models::Llama` + `plan::parallelize` with `{os.environ.get('TP_STEP_PLAN', 'configs/plans/llama_tp.json')}` (DTensor dispatch on every op)",
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
          "includes Gloo's threads), and communication per step (collectives counted by the process groups; in-op "
          "redistributions counted by the DTensor dispatcher):", "",
          "| TP | baseline CPU | eager CPU | static CPU | PyTorch CPU | eager / baseline (CPU) | static / baseline (CPU) | PyTorch / eager (CPU) | PyTorch / static (CPU) | collectives: baseline / eager / static | all-reduces: baseline / eager | DTensor op calls | in-op redistributions |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
cpu = lambda r: f"{r['cpu_ms']:.1f}" if r else "n/a"
cratio = lambda a, b: f"{a['cpu_ms'] / b['cpu_ms']:.2f}x" if a and b else "n/a"
field = lambda r, k: f"{r[k]}" if r and k in r else "n/a"
for tp in tps:
    b, e, s, p = (by.get((tp, k)) for k in ("baseline", "eager", "static", "pytorch"))
    lines.append(f"| {tp} | {cpu(b)} | {cpu(e)} | {cpu(s)} | {cpu(p)} | {cratio(e, b)} | {cratio(s, b)} | {cratio(p, e)} | {cratio(p, s)} | "
                 f"{field(b, 'collectives_per_step')} / {field(e, 'collectives_per_step')} / {field(s, 'collectives_per_step')} | "
                 f"{field(b, 'all_reduces_per_step')} / {field(e, 'all_reduces_per_step')} | "
                 f"{field(e, 'dispatch_calls_per_step')} | {field(e, 'redistributions_per_step')} |")
lines += ["", "Cells: median (min-max) ms. Targets (issue 6): eager <= 1.10x baseline, static <= 1.02x, faster than PyTorch's Python TP.",
          "First losses: " + ", ".join(f"TP={r['tp']} {r['impl']} {r['first_loss']:.6f}" for r in rows) +
          " (PyTorch draws its own init from torch's RNG, so only its magnitude is comparable; the C++ variants must agree to 1e-5 or the bench fails).",
          ""]
for tp, m in sorted(moves.items()):
    lines.append(f"Redistributions in one eager step at TP={tp} (`dtensor::redistribution_log`: where, from -> to, count): " +
                 ", ".join(f"`{k}` {v}" for k, v in sorted(m.items())) + ".")
lines += ["(`redistribute` is the plan's module-boundary hooks, the loss's `full_tensor` and gradient reduction; "
          "`redistribute backward` is their gradients; `[Replicate] -> [Shard(0)]` is a local slice.)",
          "",
          "Where the step's collectives go, eager at TP=2 with L=4 layers: forward 1 (embedding) + 2L (attention and feed-forward "
          "outputs) + 2 (the loss's max and sum of exponentials) + 1 (the loss's `full_tensor` to print it); backward 2L (attention "
          "and feed-forward input gradients) + 1 (the head's input gradient) = 21; the fused vocab-parallel cross-entropy "
          "(src/dtensor/rules/cross_entropy.cpp) computes the loss gradient locally, as the baseline does. The baseline's 21: the "
          "same, with its loss value in one all-reduce instead of the Partial loss's `full_tensor`.",
          "4 ranks on 2 shared cores are heavily oversubscribed: every collective waits until all 4 processes are scheduled, so TP=4",
          "wall times are noisy and mostly measure the number of collectives and the scheduler.",
          "",
          "Before: 2026-11-30 21:10 (same machine, load 4.5-5.7; before AdamW stepped DTensors on their shards and before "
          "permuted DTensor views carried permuted strides; the variants then used torch::optim::AdamW, per parameter, and each "
          "step made 1250 DTensor op calls): eager 1.26x / 1.09x the baseline's wall time at TP=2 / 4 (CPU 1.23x / 1.09x), "
          "static 1.23x / 1.08x (CPU 1.21x / 1.07x). 2026-11-30 17:58 (same machine, before the fused cross-entropy and the dispatch-path trims): 22 collectives per "
          "step, eager 1.14x / 1.19x the baseline's wall time at TP=2 / 4 (CPU 1.11x / 1.15x), static 1.13x / 1.06x (CPU 1.10x / "
          "1.11x). 2026-11-30 15:29 (llama_tp.json without `forward` entries and sdpa on its math path): 162 in-op "
          "redistributions and 166 collectives per step at TP=2, eager 4.46x / 6.49x the baseline's wall time at TP=2 / 4 "
          "(CPU 3.93x / 5.14x), static 4.86x / 5.86x.",
          "", "Reproduce: `bench/tp_step.sh` (TPS, TP_STEP_PLAN, TP_STEP_VARIANTS, TP_STEP_WARMUP, TP_STEP_ROUNDS, TP_STEP_PER_ROUND)."]
os.makedirs("bench/results", exist_ok=True)
open("bench/results/tp_step.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
