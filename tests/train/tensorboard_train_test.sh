#!/usr/bin/env bash
# vescale-train with log.tensorboard: the tensorboard package reads back every scalar the metrics
# JSONL holds for every step (loss, lr, grad norm, step time, tokens/s, MFU, memory, val loss)
# and the samples as text; for Mixtral at DP=2 with a timeline window, also the experts' balance
# and the window's summary.
# Usage: tensorboard_train_test.sh vescale-train python
set -euo pipefail
train=$1 python=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(dirname "$0")/../.."
"$train" --config "$root/configs/nanogpt_tiny.json" --set train.steps=6 --set train.batch_size=2 \
  --set train.seq_len=32 --set train.log_every=1 --set train.eval_every=3 --set train.eval_steps=2 \
  --set train.sample_every=3 --set train.sample_tokens=8 \
  --set log.metrics_jsonl=\"$dir/metrics.jsonl\" --set log.tensorboard=\"$dir/tb\" > "$dir/log" 2>&1 \
  || { cat "$dir/log"; exit 1; }
grep -q "sample at step 3:" "$dir/log"
"$python" "$root/tests/train/read_tensorboard.py" --against-metrics "$dir/metrics.jsonl" \
  --sample-steps 3,6 "$dir/tb"
"$train" --config "$root/configs/mixtral_tiny.json" --nproc-per-node 2 --set train.steps=4 \
  --set train.batch_size=2 --set train.seq_len=32 --set train.log_every=1 --set log.timeline.steps=\"2-3\" \
  --set log.timeline.out=\"$dir/trace.json\" --set log.metrics_jsonl=\"$dir/moe.jsonl\" \
  --set log.tensorboard=\"$dir/tb_moe\" > "$dir/log_moe" 2>&1 || { cat "$dir/log_moe"; exit 1; }
"$python" "$root/tests/train/read_tensorboard.py" --against-metrics "$dir/moe.jsonl" "$dir/tb_moe"
