#!/usr/bin/env bash
# Builds bench/pipeline_bench and runs it RUNS times at PP=4 (vescale-run, Gloo on CPU, one thread
# per rank): gpipe, 1f1b, interleaved_1f1b (2 chunks) and zb_h1 on one small LLaMA, each run's
# measured bubble beside the simulator's on the measured per-action costs and the textbook
# (p-1)/(m+p-1). Writes bench/results/pipeline.md: the median over the runs of every figure, and
# each run's own table.
# Knobs: RUNS (3), NPROC (4), PIPELINE_ARGS (passed to pipeline_bench, e.g. "--steps 8 --dim 256").
source "$(dirname "$0")/bench_env.sh"
NPROC=${NPROC:-4}
PIPELINE_ARGS=${PIPELINE_ARGS:-"--rounds 5 --steps 4 --warmup 2 --microbatches 8 --dim 192 --layers 8 --seq 64 --batch 2"}
bench_build pipeline_bench
out=$(mktemp -d)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
for run in $(seq 1 "$RUNS"); do
  # shellcheck disable=SC2086
  "$BUILD_DIR/apps/vescale-run" --nproc-per-node "$NPROC" -- "$BUILD_DIR/bench/pipeline_bench" $PIPELINE_ARGS |
    sed 's/^\[rank 0\] //' | grep '^{' | sed "s/^{/{\"run\": $run, /" >> "$out/runs.jsonl"
done
elapsed=$(( $(date +%s) - start ))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
"$VENV/bin/python" - "$out/runs.jsonl" "$load_before" "$load_after" "$NPROC" "$PIPELINE_ARGS" "$elapsed" <<'PY'
import datetime, json, os, platform, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
load_before, load_after, nproc, args, elapsed = sys.argv[2:7]
order = []
for r in rows:
    if r["schedule"] not in order:
        order.append(r["schedule"])
runs = sorted({r["run"] for r in rows})
by = {(r["run"], r["schedule"]): r for r in rows}
med = lambda s, k: statistics.median(by[(n, s)][k] for n in runs if (n, s) in by and k in by[(n, s)])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
r0 = rows[0]
p, m = r0["ranks"], r0["microbatches"]
name = lambda s, r: s + (f" (chunks {r['chunks']})" if r["chunks"] > 1 else "")
header = ("| schedule | pipeline step ms | trainer step ms | simulated step ms | measured bubble | simulated bubble "
          "| textbook (p-1)/(m+p-1) | step / 1f1b (paired) | F / B (or I) / W ms per action | CPU ms per step | cores busy |")
rule = "|---|---|---|---|---|---|---|---|---|---|---|"
def table(get, r_of):
    out = [header, rule]
    for s in order:
        r = r_of(s)
        fbw = f"{get(s, 'f_ms'):.2f} / {get(s, 'b_ms'):.2f}" + (f" / {get(s, 'w_ms'):.2f}" if s == "zb_h1" else "")
        ratio = f"{get(s, 'vs_1f1b'):.2f}x" if "vs_1f1b" in r else "n/a"
        out.append(f"| {name(s, r)} | {get(s, 'step_ms'):.1f} | {get(s, 'trainer_ms'):.1f} | {get(s, 'sim_ms'):.1f} | "
                   f"{get(s, 'bubble'):.3f} | {get(s, 'sim_bubble'):.3f} | {get(s, 'textbook'):.3f} | {ratio} | {fbw} | "
                   f"{get(s, 'cpu_ms'):.0f} | {100 * get(s, 'utilization'):.0f}% |")
    return out
first = lambda s: next(by[(n, s)] for n in runs if (n, s) in by)
cmd = f"build/apps/vescale-run --nproc-per-node {nproc} -- build/bench/pipeline_bench {args}"
lines = [
    "# Pipeline schedules: measured bubble vs the simulator's",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores (shared with other jobs: load average {load_before} before, {load_after} after); "
    f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; Gloo on CPU, 1 thread per rank, launched by vescale-run; "
    f"{len(runs)} runs, {elapsed} s in all.",
    f"Model: LLaMA, dim {r0['dim']}, {r0['layers']} layers, 4 heads / 2 kv heads, ffn {3 * r0['dim']}, vocab 256, fp32; "
    f"{m} micro-batches of {r0['batch']} x {r0['seq']} tokens per step; PP={p} (configs/plans/llama_pp.json with the schedule, "
    f"micro-batches and chunks patched in, and stage cuts giving every stage {r0['layers'] // p} blocks, "
    f"{r0['layers'] // (2 * p)} for interleaved_1f1b's {2 * p} stages, the embedding on the first stage and the head on the last: "
    "pipeline_bench --split blocks); vescale's Trainer (AdamW, grad clipping). Each run: "
    f"{r0['rounds']} rounds of every schedule in turn (the order rotated per round), each a fresh Trainer, "
    f"{r0['warmup']} warm-up steps, then {r0['steps']} measured steps.",
    "",
    f"Command (bench/pipeline.sh runs it RUNS={len(runs)} times and writes this file): `{cmd}`",
    "",
    "- pipeline step: the runner's `train_step` (every action of the schedule), the slowest rank's `RunnerStats::step_s`, "
    "median over the measured steps of all rounds; trainer step: the whole `Trainer::step` (optimizer, the grad-norm and "
    "loss collectives too); simulated step: the simulator's makespan on the measured per-action costs.",
    "- measured bubble: per step 1 - (sum over ranks of `busy_s`) / (ranks x pipeline step), median over steps. `busy_s` is "
    "the wall time of F, B, I and W actions less their own receive waits.",
    "- simulated bubble: `parallel::pipeline::simulate` of the same schedule with `ActionCosts` from that run's measured mean "
    "wall ms per action (all ranks, all measured steps), p2p 0. zb_h1 gets its measured I and W; the other schedules run "
    "full backwards (B), which the simulator charges as backward_input + backward_weight, so their measured B is split into "
    "I and W by zb_h1's measured I / (I + W) (the split moves no figure of theirs, only the sum counts). Costs are one per "
    "kind for every stage, so stage imbalance (stage 0's embedding, the last stage's head and loss) is not in it.",
    "- textbook: (p-1)/(m+p-1), the GPipe / 1F1B figure for equal F and B; interleaved_1f1b's textbook is "
    f"(p-1)/(v m+p-1) = {(p - 1) / (2 * m + p - 1):.3f} with v = 2, zb_h1's lower still ((p-1)(F+I-W) idle per rank).",
    "- step / 1f1b (paired): per round, the schedule's median pipeline step over 1f1b's in the same round, median over rounds. "
    "CPU ms per step: the ranks' process CPU time (all threads) per trainer step, summed over ranks; cores busy: that over "
    "(min(cores, ranks) x the trainer step's wall time), the share of the cores this benchmark got.",
    "",
    "## Median over the runs",
    "",
] + table(med, first) + [
    "",
]
for n in runs:
    lines += [f"Run {n}:", ""] + table(lambda s, k, n=n: by[(n, s)][k], lambda s, n=n: by[(n, s)]) + [""]
lines += ["Per rank measured bubble (1 - busy / pipeline step), median over runs: " + "; ".join(
    f"{s} " + " / ".join(f"{statistics.median(by[(n, s)]['rank_bubble'][i] for n in runs):.2f}" for i in range(p))
    for s in order) + ". Peak live activation sets per rank (run 1): " + "; ".join(
    f"{s} " + " / ".join(str(v) for v in first(s)["peak_live"]) for s in order) + ".", ""]
lines += [
    "## How to read these numbers on this machine",
    "",
    f"{p} ranks share {os.cpu_count()} CPU cores, so at most {os.cpu_count()} ranks make progress at any moment, and other "
    "jobs on this shared machine take cores too. Two consequences. (1) An action's wall time, which `busy_s` sums, "
    "includes the time its rank was runnable but had no core, so per-action costs grow with the number of ranks computing "
    "at once, and a rank blocked on a receive also waits out its sender's lost core time. (2) The measured bubble is the "
    "share of rank-time spent blocked in receives, not the schedule's idle time: a run that keeps both cores saturated "
    f"can show anything from 0 (all {p} ranks runnable all the time) to {1 - os.cpu_count() / p:.1f} (exactly "
    f"{os.cpu_count()} runnable), so measured bubbles mix the schedule's dependencies with CPU contention and sit near "
    "that range whatever the schedule. Read instead: 'cores busy' (CPU time over the cores' time: whether the machine "
    "was kept working; external load lowers it too), 'CPU ms per step' over the cores (the floor of the step on this "
    "machine, whatever the schedule), and the paired step ratios (the schedules' wall times under the same drift).",
    "The simulated bubble is the distributed-systems figure: one device per rank, the measured mean cost per action "
    "(contention is in those means, averaged into one cost per kind: scaling every cost alike moves no bubble fraction), no "
    "contention between ranks. It is what the schedule gives on one accelerator per stage with these relative F / B / W "
    "costs; the measured bubble is what it gives on this oversubscribed CPU.",
    "",
]
# The hand-written reading of the numbers, kept from the previous file when there is one.
path = "bench/results/pipeline.md"
kept = ""
if os.path.exists(path):
    old = open(path).read()
    if "\n## Reading" in old:
        kept = old[old.index("\n## Reading") + 1:].rstrip() + "\n"
os.makedirs("bench/results", exist_ok=True)
open(path, "w").write("\n".join(lines) + kept)
print("\n".join(lines))
PY
