#!/usr/bin/env bash
# train.global_batch_size fixes the math whatever the layout: one config, unchanged but for the
# mesh, the plan and ZeRO, trained at 1 rank, dp=2, tp=2, pp=2 (1f1b, and zb_h1 through
# --set parallel.pipeline.schedule), pp x dp x tp, ZeRO-3, and (a Mixtral) ep=2: every step's
# loss within 1e-5 relative of the 1-rank run. Then the errors: a global batch the layout does
# not divide (naming the four numbers), grad_accum next to it, pipeline overrides without a
# pipeline plan.
# Usage: global_batch_test.sh path/to/vescale-train
set -uo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(cd "$(dirname "$0")/../.." && pwd)"
plans=$root/configs/plans
# 8 sequences per step in micro-batches of 2: 4 micro-batches on one rank, 2 per rank at dp=2.
fixed=(--set train.global_batch_size=8 --set train.micro_batch_size=2 --set train.seq_len=32
       --set train.steps=3 --set train.log_every=1 --set train.warmup_steps=1)
run() {  # run NAME RANKS CONFIG [--set ...]
  local name=$1 ranks=$2 config=$3
  shift 3
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(--nproc-per-node "$ranks")
  timeout 240 "$train" --config "$root/configs/$config.json" "${launch[@]}" "${fixed[@]}" \
    --set log.metrics_jsonl=\""$dir/$name.jsonl"\" "$@" > "$dir/$name.log" 2>&1 \
    || { tail -n 30 "$dir/$name.log"; echo "global batch: the $name run failed" >&2; exit 1; }
}
# Same losses as the reference within 1e-5 relative, and the same global batch in the log.
same() {  # same REFERENCE NAME...
  local ref=$1
  shift
  python3 - "$dir" "$ref" "$@" <<'PY' || exit 1
import json, sys
d, ref, names = sys.argv[1], sys.argv[2], sys.argv[3:]
load = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if '"loss"' in l]
want = load(ref)
assert len(want) == 3, f"{ref}: {len(want)} steps"
for n in names:
    got = load(n)
    rel = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) else None
    print(f"{n}: losses {got}, max relative difference to {ref} {rel}")
    if rel is None or rel > 1e-5:
        sys.exit(f"global batch: {n} differs from {ref}")
PY
  for n in "$@"; do
    grep -q "8 sequences" "$dir/$n.log" || { grep -m3 -i "batch" "$dir/$n.log"; echo "global batch: $n does not report 8 sequences per step" >&2; exit 1; }
  done
}
run one 1 llama_tiny
run dp2 2 llama_tiny --set 'parallel.mesh={"dp":2}'
run tp2 2 llama_tiny --set 'parallel.mesh={"tp":2}' --set parallel.plan=\""$plans/llama_tp.json"\"
run pp2_1f1b 2 llama_tiny --set 'parallel.mesh={"pp":2}' --set parallel.plan=\""$plans/llama_pp.json"\"
run pp2_zb_h1 2 llama_tiny --set 'parallel.mesh={"pp":2}' --set parallel.plan=\""$plans/llama_pp.json"\" \
  --set parallel.pipeline.schedule=zb_h1
grep -q "pipeline: zb_h1" "$dir/pp2_zb_h1.log" || { grep pipeline "$dir/pp2_zb_h1.log"; echo "--set parallel.pipeline.schedule was not applied" >&2; exit 1; }
run pp2_dp2_tp2 8 llama_tiny --set 'parallel.mesh={"pp":2,"dp":2,"tp":2}' \
  --set parallel.plan=\""$plans/llama_pp_dp_tp.json"\"
run dp2_zero3 2 llama_tiny --set 'parallel.mesh={"dp":2}' --set parallel.zero=3
same one dp2 tp2 pp2_1f1b pp2_zb_h1 pp2_dp2_tp2 dp2_zero3
# Experts: aux-loss-free balancing (the load-balancing loss is over the sequences forwarded
# together, which a layout groups differently; the bias moves with the step's global loads).
moe=(--set model.aux_loss_coef=0 --set model.expert_bias_rate=0.001)
run moe_one 1 mixtral_tiny "${moe[@]}"
run moe_ep2 2 mixtral_tiny "${moe[@]}" --set 'parallel.mesh={"ep":2}' --set parallel.plan=\""$plans/mixtral_ep.json"\"
same moe_one moe_ep2

# Errors, before any rank starts.
fails() {  # fails NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2
  shift 2
  if "$train" --config "$root/configs/llama_tiny.json" "${fixed[@]}" "$@" > "$dir/$name.err" 2>&1; then
    echo "global batch: $name was accepted" >&2; exit 1
  fi
  grep -qF -- "$want" "$dir/$name.err" || { cat "$dir/$name.err"; echo "global batch: $name: no '$want'" >&2; exit 1; }
}
fails indivisible "train.global_batch_size=8 is not a multiple of train.micro_batch_size=2 x 3 data ranks (dp=3) = 6" \
  --nproc-per-node 3 --set 'parallel.mesh={"dp":3}'
fails with_accum "train.grad_accum: is derived from train.global_batch_size" --set train.grad_accum=2
fails no_pipeline "parallel.pipeline.* overrides a plan's \"pipeline\" section, but parallel.plan is empty" \
  --set parallel.pipeline.microbatches=4 --set train.global_batch_size=0
echo "global batch: ok"
