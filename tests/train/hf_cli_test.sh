#!/usr/bin/env bash
# Through the command line: train llama_tiny 20 steps with a checkpoint, vescale-convert it to a
# Hugging Face folder (bf16), and start a new run from it with model.init_from at TP=2: its first
# loss is the trained model's, not a fresh one's.
# Usage: hf_cli_test.sh path/to/vescale-train path/to/vescale-convert
set -euo pipefail
train=$1 convert=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(dirname "$0")/../.."
small=(--set train.batch_size=4 --set train.seq_len=64 --set log.metrics_jsonl=\"\" --set train.log_every=1)
"$train" --config "$root/configs/llama_tiny.json" "${small[@]}" --set train.steps=20 \
  --set checkpoint.dir=\"$dir/ckpt\" > "$dir/first.log" 2>&1
"$convert" --checkpoint "$dir/ckpt" --to-hf "$dir/hf" --dtype bf16 | grep -q "wrote $dir/hf"
"$train" --config "$root/configs/llama_tiny.json" "${small[@]}" --set train.steps=1 \
  --nproc-per-node 2 --set 'parallel.mesh={"tp":2}' --set parallel.plan=\"$root/configs/plans/llama_tp.json\" \
  --set model.init_from=\"$dir/hf\" > "$dir/second.log" 2>&1
grep -q "model.init_from: 39 weights from $dir/hf" "$dir/second.log"
loss() { grep -o "step  *$2/[0-9]* | loss [0-9.]*" "$1" | head -1 | awk '{print $NF}'; }
fresh=$(loss "$dir/first.log" 1) trained=$(loss "$dir/first.log" 20) again=$(loss "$dir/second.log" 1)
echo "fresh step 1 loss $fresh, trained step 20 loss $trained, from the export: $again"
# From the export the loss is near the trained one (bf16 weights, another batch), far below fresh.
python3 -c "import sys; f, t, a = map(float, sys.argv[1:]); sys.exit(0 if a < f - 1.0 and abs(a - t) < 0.5 else 1)" \
  "$fresh" "$trained" "$again"
# A folder without config.json is named.
if "$train" --config "$root/configs/llama_tiny.json" --set model.init_from=\"$dir\" > "$dir/bad" 2>&1; then
  echo "expected an error" >&2; exit 1
fi
grep -q "model.init_from: no $dir/config.json" "$dir/bad"
echo "hf cli: ok"
