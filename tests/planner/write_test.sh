#!/usr/bin/env bash
# vescale-plan --write makes a layout into a config and a plan (from the family's template)
# that vescale-train runs as they are, and they train like one device: the written layouts
# (tp with and without SP, pp, dp with ZeRO-1, the planner's own choice; GPT-2 with SP; a
# Mixtral on ep) at 2 ranks give the 1-rank run's losses within 1e-5 relative (the global batch
# fixes the math).
# Usage: write_test.sh vescale-plan vescale-train
set -uo pipefail
plan=$1 train=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(--set train.global_batch_size=8 --set train.micro_batch_size=2 --set train.seq_len=32
       --set train.steps=3 --set train.log_every=1 --set train.warmup_steps=1)
moe=(--set model.aux_loss_coef=0 --set model.expert_bias_rate=0.001)
losses() { python3 -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l])" "$1"; }
reference() {  # reference NAME CONFIG [--set ...]
  local name=$1 config=$2
  shift 2
  "$train" --config "$config" "${small[@]}" "$@" --set log.metrics_jsonl=\""$dir/$name.jsonl"\" \
    > "$dir/$name.log" 2>&1 || { tail -20 "$dir/$name.log"; echo "write: the $name reference failed" >&2; exit 1; }
}
written() {  # written NAME REFERENCE CONFIG LAYOUT [--set ...]: --write, run, compare
  local name=$1 ref=$2 config=$3 layout=$4
  shift 4
  local pick=()
  [ -n "$layout" ] && pick=(--layout "$layout")
  "$plan" --config "$config" "${small[@]}" "$@" --gpus 2 --gpus-per-node 2 "${pick[@]}" \
    --write "$dir/$name" > "$dir/$name.plan.log" 2>&1 \
    || { cat "$dir/$name.plan.log"; echo "write: vescale-plan --write for $name failed" >&2; exit 1; }
  timeout 240 "$train" --config "$dir/$name/config.json" --nproc-per-node 2 \
    --set log.metrics_jsonl=\""$dir/$name.jsonl"\" > "$dir/$name.log" 2>&1 \
    || { grep -m1 "wrote" "$dir/$name.plan.log"; tail -20 "$dir/$name.log"; echo "write: the written $name did not train" >&2; exit 1; }
  # The plan really shards (tp, ep), not replicates everything: parallelize says how many.
  case $layout in *tp=2*|*ep=2*)
    grep -q "([1-9][0-9]* shard placements)" "$dir/$name.log" \
      || { grep parallelize "$dir/$name.log"; echo "write: $name placed no shard" >&2; exit 1; } ;;
  esac
  python3 - "$dir/$ref.jsonl" "$dir/$name.jsonl" "$name" "$(grep -o 'for .*; run' "$dir/$name.plan.log")" <<'PY' || exit 1
import json, sys
load = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
want, got = load(sys.argv[1]), load(sys.argv[2])
rel = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) == 3 else None
print(f"{sys.argv[3]} ({sys.argv[4][4:-5]}): losses {got}, max relative difference {rel}")
sys.exit(0 if rel is not None and rel <= 1e-5 else f"write: {sys.argv[3]} differs from one device")
PY
}
reference llama llama_tiny
written llama_tp2_sp llama llama_tiny "tp=2 sp zero0 mb2"
written llama_tp2 llama llama_tiny "tp=2 zero0 mb2"
written llama_pp2 llama llama_tiny "pp=2 zero0 mb2 1f1b"
written llama_dp2_zero1 llama llama_tiny "dp=2 zero1 mb2"
written llama_best llama llama_tiny ""
reference gpt nanogpt_tiny
written gpt_tp2_sp gpt nanogpt_tiny "tp=2 sp zero0 mb2"
reference moe mixtral_tiny "${moe[@]}"
written moe_ep2 moe mixtral_tiny "ep=2 zero0 mb2" "${moe[@]}"
# parallel.plan=auto: the planner chooses for the 2 launched ranks (this machine measured at
# start), logs its choice and, after a few steps, measured against predicted; the math is the
# one-device run's.
mkdir -p "$dir/tmp"
TMPDIR="$dir/tmp" timeout 240 "$train" --config llama_tiny "${small[@]}" --set parallel.plan=auto \
  --nproc-per-node 2 --set log.metrics_jsonl=\""$dir/auto.jsonl"\" > "$dir/auto.log" 2>&1 \
  || { tail -20 "$dir/auto.log"; echo "write: parallel.plan=auto failed" >&2; exit 1; }
# The plan it wrote for the run is gone with the run.
[ -z "$(ls -A "$dir/tmp")" ] || { ls "$dir/tmp"; echo "write: parallel.plan=auto left files in TMPDIR" >&2; exit 1; }
grep -q "plan auto: .*, the best of [0-9]* layouts of 2 ranks on this machine; predicted" "$dir/auto.log" \
  && grep -q "plan check: predicted [0-9]* ms/step, measured [0-9]* ms/step" "$dir/auto.log" \
  || { grep -i plan "$dir/auto.log"; echo "write: no plan auto / plan check lines" >&2; exit 1; }
grep "plan auto\|plan check" "$dir/auto.log"
python3 - "$dir/llama.jsonl" "$dir/auto.jsonl" <<'PY2' || exit 1
import json, sys
load = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
want, got = load(sys.argv[1]), load(sys.argv[2])
rel = max(abs(a - b) / abs(b) for a, b in zip(got, want))
print(f"auto: losses {got}, max relative difference to one device {rel}")
sys.exit(0 if rel <= 1e-5 else "write: parallel.plan=auto changed the math")
PY2
# A family without sequence-parallel rules is refused SP, naming the template.
if "$plan" --config mixtral_tiny "${small[@]}" --gpus 2 --layout "tp=2 sp zero0 mb2" --write "$dir/bad" > "$dir/bad.log" 2>&1; then
  echo "write: SP for Mixtral was accepted" >&2; exit 1
fi
grep -q "has no sequence-parallel rules" "$dir/bad.log" || { cat "$dir/bad.log"; exit 1; }
echo "write: ok"
