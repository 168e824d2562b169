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
export LOAD_START=$(cut -d" " -f1 /proc/loadavg)
# name | config | overrides (train.* / model.*)
CASES=(
  "nanogpt_tiny (4 x 128, batch 16 x 128)|configs/nanogpt_tiny.json|train.batch_size=16"
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
    f"Machine: {cpu}, {os.cpu_count()} cores (load average {os.environ['LOAD_START']} at the start, {load} at the end: "
    f"the machine is shared); "
    f"{datetime.date.today()}; torch {torch.__version__}; CPU, fp32, 1 thread each.",
    "One step = forward, cross-entropy, backward, global-norm clip, AdamW, one host read of loss and norm.",
    "Ours is `Trainer::step` (with the data loader and LR schedule); PyTorch's is the same GPT-2 in",
    "`torch.nn` with `torch.optim.AdamW`. Alternating runs; medians over all measured steps.",
    "Wall: the step's elapsed time. CPU: the stepping thread's CPU time, which leaves out the time",
    "other processes on this shared machine take the core away.",
    "",
    "| case | vescale wall ms | PyTorch wall ms | wall ratio | vescale CPU ms | PyTorch CPU ms | CPU ratio |",
    "|---|---|---|---|---|---|---|",
]
for i, name in enumerate(names):
    ours = [json.loads(l) for l in open(os.path.join(d, f"ours.{i}.jsonl"))]
    py = [json.loads(l) for l in open(os.path.join(d, f"py.{i}.jsonl"))]
    row = [name]
    for key in ("ms", "cpu_ms"):
        mo, mp = statistics.median(r[key] for r in ours), statistics.median(r[key] for r in py)
        row += [f"{mo:.1f}", f"{mp:.1f}", f"{mo / mp:.2f}x"]
    lines.append("| " + " | ".join(row) + " |")
lines += ["",
    "Ours runs as `vescale-train` does: a 1-device mesh, the plan's init through the Philox RNG,",
    "then plain tensors (`plain_on_one_device`, docs/plan.md). What changed since the first",
    "measurement (1.08x / 1.11x, when the mesh path still made every parameter a DTensor):",
    "- **No DTensors on one device.** Every op had gone through the DTensor dispatcher, and SDPA",
    "  on DTensors decomposes into its math path (bmm, softmax and masking ops: ~140 ms of self",
    "  time in a ~590 ms nanogpt_tiny step) instead of CPU flash attention.",
    "- **`aten::linear`** (`models::Linear`): one `addmm` with the bias, as Python's `F.linear`,",
    "  not the C++ frontend's `matmul` + in-place bias add.",
    "- **Fused AdamW** (`at::_fused_adamw_`, one kernel per group, ~1-2 ms/step; the Python loop's",
    "  default `torch.optim.AdamW` on CPU is the per-tensor loop) and clipping with one",
    "  `_foreach_norm` and one `_foreach_mul_`.",
    "- **No per-step page faults.** glibc mapped the step's large blocks fresh and trimmed the",
    "  heap top, so our process page-faulted ~5.4K pages per nanogpt_tiny step (the Python",
    "  process ~0.8K); the trainer keeps freed blocks in the heap (`mallopt`), ~0.1K per step.",
    "Per-op profile now (`VESCALE_PROFILE=1` on both sides): the same kernels per step (35 mm,",
    "16 addmm, 4 + 4 flash attention, 4 + 4 GELU for nanogpt_tiny), so the step is compute-bound",
    "and the ratio sits near 1. The 0.9x target is not met: on this shared 2-core machine two",
    "runs of this script 10 minutes apart gave 1.04x / 1.09x and 0.98x / 1.06x (shorter",
    "alternating runs of nanogpt_tiny alone: 0.91x to 0.93x). The 6 x 384 case is slower on our",
    "side in every run, by more than the profile's op times explain; not yet found.",
    "",
    "Reproduce: `bench/train_step.sh` (ROUNDS, STEPS, WARMUP in the environment);",
    "`VESCALE_PROFILE=1 build/bench/train_step CONFIG STEPS` and",
    "`VESCALE_PROFILE=1 python bench/train_step.py CONFIG STEPS` print per-op tables."]
open("bench/results/train_step.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
