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
    "then plain tensors (`plain_on_one_device`, docs/plan.md). Earlier rounds (1.08x / 1.11x at",
    "first, then 0.98x / 1.06x wall) removed DTensor dispatch on one device, used `aten::linear`",
    "(one addmm with the bias), fused AdamW and `_foreach` clipping, and kept freed host memory in",
    "the heap (`mallopt`: ~0 page faults per step, the Python process ~1.8K).",
    "",
    "**Where the 6 x 384 time goes** (`perf record` of both processes, 8 steps of 6 x 384 each): the",
    "same kernels with the same sample counts (MKL sgemm kernel 7257 vs 7333 samples, its packing",
    "routines 754 vs 778, SLEEF tanh 450 vs 459, flash attention 77 vs 62). Outside ATen kernels ours has",
    "nothing above 0.5% of a step (fused AdamW 0.4%, malloc 0.3%). The Python process spends",
    "3-4% in its garbage collector (`gc_collect_main`) and the interpreter, and more in the",
    "per-tensor AdamW. So the wall-clock gap of the last round was not extra work in our process:",
    "on this shared 2-core machine (load 3-7 from other builds and tests), the wall time largely",
    "measures how much of the core each process got. The CPU-time columns leave out the time a",
    "process waits for the core, but not the other core's competition for memory and L3 (most",
    "likely why 6 x 384, with the larger working set, moves most); they still move by 5-10%",
    "between runs.",
    "",
    "**Less work than the Python loop, same math** (this round):",
    "- **Fused cross-entropy** (`kernels/cross_entropy.h`): one pass per row for the logsumexp,",
    "  keeping [N, 2] instead of the [N, V] log-probabilities; backward writes softmax - onehot in",
    "  one pass, with no zero fill, scatter or log_softmax backward. Small here (vocab 256: ~1 ms",
    "  per step); it grows with the vocabulary.",
    "- **GELU keeps its tanh** (`kernels/gelu.h`): backward is arithmetic on x and the saved tanh,",
    "  where ATen's `gelu_backward` evaluates tanh again (it cost 1.5x the forward: 24 ms vs 16 ms",
    "  per nanogpt_tiny step in the op profile; now 11 ms).",
    "",
    "Three runs of this script on 2026-11-30 (5 alternating rounds each; medians, ours / Python):",
    "",
    "| run (load average start -> end) | tiny wall | tiny CPU | 6 x 384 wall | 6 x 384 CPU |",
    "|---|---|---|---|---|",
    "| 20:30 (6.0 -> 4.4) | 1.02x | 0.87x | 0.97x | 0.99x |",
    "| 20:39 (4.1 -> 5.6) | 0.90x | 0.93x | 0.91x | 0.92x |",
    "| 21:04 (3.7 -> 3.0), the quietest, the table above | 0.91x | 0.90x | 0.95x | 0.94x |",
    "| all 150 steps a side pooled | 0.98x | 0.90x | 0.95x | 0.94x |",
    "",
    "Under heavy load the wall ratio swings by 10% from run to run; the quietest run has wall",
    "close to CPU on both sides. **nanogpt_tiny is at the 0.9x target in CPU time (0.90x",
    "pooled, 0.87-0.93x per run, so not in every run); 6 x 384 misses it (0.94x pooled, 0.92-0.99x per run).** What is",
    "left of the step is ~90% MKL sgemm, flash attention, LayerNorm and the GELU forward: the same",
    "calls on both sides, so further gains need other kernels (e.g. a GEMM with the bias and",
    "activation in its epilogue) rather than less framework work.",
    "",
    "Rerun on 2026-12-01 02:40 UTC, the machine otherwise idle (load 0 before the preceding tests; 3.4 -> 1.0 over the run),",
    "same commit as the table above: nanogpt_tiny 223.9 vs 263.4 ms (0.85x wall, 0.85x CPU), 6 x 384 2210.7 vs 2320.6 ms (0.95x",
    "wall, 0.95x CPU). On a quiet machine, tiny meets the target and 6 x 384 still misses it by 5%.",
    "An op profile of 6 x 384 with shapes on both sides (`VESCALE_PROFILE=shapes`) shows the same total GEMM time (ours",
    "1664 ms per step, Python 1635) but one anomaly left to explain: ours spends 54-82 ms per call on",
    "`mm [2048,384] x [384,1536]` (the MLP c_proj's input gradient) and 19-24 ms on the bias broadcast `copy_ [2048,1536]`",
    "(c_fc's addmm), where Python spends 35 and 7 ms on the same calls; the same mm alone in a C++ program takes 33-40 ms",
    "whatever the operands' alignment, and neither ATen's GELU nor glibc's default heap settings change it. Both ops are the",
    "first writers of a fresh [2048, 1536] buffer. At Python's speed for those two calls, 6 x 384 would be ~0.85x.",
    "In nanogpt_tiny the same call ([2048,128] x [128,512]) is ~1.4x its neighbours on both sides (Python 5.8 ms vs 3.9-4.3,",
    "ours 6.3 ms vs 4.1-4.4), so part of it is MKL's speed for that layout (grad @ W, neither operand transposed).",
    "",
    "Reproduce: `bench/train_step.sh` (ROUNDS, STEPS, WARMUP in the environment);",
    "`VESCALE_PROFILE=1 build/bench/train_step CONFIG STEPS` and",
    "`VESCALE_PROFILE=1 python bench/train_step.py CONFIG STEPS` print per-op tables."]
open("bench/results/train_step.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
