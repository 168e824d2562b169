#!/usr/bin/env bash
# Context parallelism at a long sequence on this CPU (issue 35): llama_tiny on one sequence of
# SEQ tokens per step, at one device and at cp=2 and 4 with ring and all-gather attention
# (zigzag chunks), each rank one thread (vescale-run, Gloo). Per layout: the median step time as
# a ratio of one device's and against the ideal (one device's / cp, times what cp ranks cost on
# this machine by themselves, from dp=cp runs), each rank's activations (the counting allocator's peak less a
# 16-token run's), and from the timeline (steps 2..STEPS) how much of the cp group's
# communication the block computation hides: the exposed share of its in-flight time.
# Writes bench/results/context_parallel.md. Knobs: SEQ (8192), STEPS (3).
source "$(dirname "$0")/bench_env.sh"
SEQ=${SEQ:-8192} STEPS=${STEPS:-3}
train=$BUILD_DIR/apps/vescale-train
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--set train.global_batch_size=1 --set train.micro_batch_size=1 --set train.warmup_steps=1
        --set train.eval_every=0 --set train.sample_every=0 --set train.log_every=1
        --set model.max_seq_len="$SEQ")
run() {  # run NAME RANKS SEQ MESH [--set ...]
  local name=$1 ranks=$2 seq=$3 mesh=$4
  shift 4
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(--nproc-per-node "$ranks")
  echo "context parallel bench: $name" >&2
  "$train" --config configs/llama_tiny.json "${launch[@]}" "${common[@]}" --set train.seq_len="$seq" \
    --set train.steps="$STEPS" --set "parallel.mesh=$mesh" --set log.metrics_jsonl=\""$out/$name.jsonl"\" \
    --set log.timeline.steps=\""2-$STEPS"\" --set log.timeline.out=\""$out/$name.trace.json"\" "$@" \
    > "$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
}
plan() {  # plan ATTENTION: a replicated plan whose context section names ATTENTION
  printf '{"mesh": ["dp"], "context": {"dim": "cp", "attention": "%s", "balance": "zigzag"}, "params": {"*": ["Replicate"]}}\n' "$1" \
    > "$out/$1.json"
  echo "$out/$1.json"
}
run base 1 16 '{"dp":1}'
run one 1 "$SEQ" '{"dp":1}'
# What N ranks on this machine cost by themselves: dp=N on N sequences does one device's work
# per rank, so its step over one device's is the machine's slowdown at N ranks (cores shared,
# memory bandwidth shared), the factor cp's ideal step time carries too.
for n in 2 4; do
  run "dp$n" "$n" "$SEQ" "{\"dp\":$n}" --set train.global_batch_size="$n"
done
for cp in 2 4; do
  for attention in ring allgather; do
    run "cp$cp.$attention" "$cp" "$SEQ" "{\"cp\":$cp}" --set parallel.plan=\""$(plan $attention)"\"
  done
done
"$VENV/bin/python" - "$out" "$SEQ" "$STEPS" <<'PY' > bench/results/context_parallel.md
import datetime, json, statistics, sys
d, seq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def lines(n): return [json.loads(l) for l in open(f"{d}/{n}.jsonl")]
def step_ms(n): return statistics.median(r["step_ms"] for r in lines(n) if "loss" in r and r["step"] >= 2)
def peak(n): return max(r["tensor_peak_gb"] for r in lines(n) if "tensor_peak_gb" in r)
def timeline(n): return [r["timeline"] for r in lines(n) if "timeline" in r][-1]
base, one = peak("base"), step_ms("one")
act_one = peak("one") - base
print(f"# Context parallelism at {seq} tokens\n")
print(f"{datetime.date.today()}; `bench/context_parallel.sh` (SEQ={seq}, STEPS={steps}); llama_tiny "
      "(dim 128, 4 layers, 4 query and 2 kv heads), one sequence per step, fp32, one thread per "
      "rank on this 2-core machine (vescale-run, Gloo over loopback). Step time: median of steps 2.."
      f"{steps}. Activations: rank 0's counting-allocator peak less a 16-token run's. cp traffic: "
      "the timeline's split of the time the cp group's transfers are in flight into overlapped "
      "(the rank computes on) and exposed (it waits), per step, rank 0.\n")
slow = {n: step_ms(f"dp{n}") / one for n in (2, 4)}
print("Ideal step at cp: one device's / cp, times this machine's slowdown at cp ranks (dp=cp on cp "
      "sequences against one device on one: " + ", ".join(f"{slow[n]:.2f} at {n} ranks" for n in (2, 4)) +
      "); efficiency = ideal / measured.\n")
print("| layout | step ms | vs one device | efficiency | activations per rank | vs one device | cp traffic in flight (ms/step) | exposed | exposed share |")
print("|---|---|---|---|---|---|---|---|---|")
print(f"| one device | {one:.0f} | 1.00 | - | {act_one * 1024:.1f} MiB | 1.000 | - | - | - |")
for cp in (2, 4):
    for attention in ("ring", "allgather"):
        n = f"cp{cp}.{attention}"
        t = timeline(n)["ranks"][0]
        c = t["dims"]["cp"]
        per = t["steps"]
        flight = (c["overlapped_ms"] + c["exposed_ms"]) / per
        act = peak(n) - base
        ideal = one / cp * slow[cp]
        print(f"| cp={cp} {attention} | {step_ms(n):.0f} | {step_ms(n) / one:.2f} | {100 * ideal / step_ms(n):.0f}% | {act * 1024:.1f} MiB | "
              f"{act / act_one:.3f} | {flight:.0f} | {c['exposed_ms'] / per:.0f} | "
              f"{100 * c['exposed_ms'] / max(1e-9, c['overlapped_ms'] + c['exposed_ms']):.1f}% |")
PY
cat bench/results/context_parallel.md
