#!/usr/bin/env bash
# vescale-train --timeline on one process writes a Chrome trace and a summary line in the
# metrics JSONL; scripts/plot-timeline draws it (PNG and SVG); plot-metrics skips the summary
# line; a bad trace is named. Usage: plot_timeline_test.sh path/to/vescale-train
set -euo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(dirname "$0")/../.."
"$train" --config "$root/configs/llama_tiny.json" --set train.steps=3 --set model.n_layers=2 \
  --set train.batch_size=2 --set train.seq_len=32 --set log.metrics_jsonl=\"$dir/m.jsonl\" \
  --timeline "$dir/t.json" > "$dir/log" 2>&1
grep -q "timeline: steps 2-3 on 1 ranks -> $dir/t.json" "$dir/log"
grep -q '"timeline"' "$dir/m.jsonl"
"$root/scripts/plot-timeline" "$dir/t.json" | grep -q "wrote $dir/t.png (1 ranks"
[ "$(head -c 4 "$dir/t.png" | tail -c 3)" = "PNG" ]
"$root/scripts/plot-timeline" "$dir/t.json" -o "$dir/t.svg" --steps 3-3 >/dev/null
grep -q "<svg" "$dir/t.svg"
"$root/scripts/plot-metrics" "$dir/m.jsonl" -o "$dir/m.png" | grep -q "3 steps"
# With activation checkpointing, each block's backward holds its recompute.
"$train" --config "$root/configs/llama_tiny.json" --set train.steps=2 --set model.n_layers=2 \
  --set train.batch_size=2 --set train.seq_len=32 --set log.metrics_jsonl=\"\" \
  --set train.activation_checkpointing=true --set log.timeline.steps=\"2\" \
  --set log.timeline.out=\"$dir/ac.json\" > "$dir/log_ac" 2>&1
[ "$(grep -o '"cat":"recompute"' "$dir/ac.json" | wc -l)" = 2 ]
[ "$(grep -o '"name":"layers\.[01]","cat":"backward"' "$dir/ac.json" | wc -l)" = 2 ]
echo '{"traceEvents": []}' > "$dir/empty.json"
if "$root/scripts/plot-timeline" "$dir/empty.json" 2> "$dir/err"; then
  echo "expected a failure on a trace without spans" >&2
  exit 1
fi
grep -q "plot-timeline: " "$dir/err"
# A window past the last step is a config error naming the field.
if "$train" --config "$root/configs/llama_tiny.json" --set train.steps=3 \
     --set log.timeline.steps=\"5-7\" > "$dir/bad" 2>&1; then
  echo "expected a config error" >&2
  exit 1
fi
grep -q "log.timeline.steps" "$dir/bad"
echo "plot-timeline: ok"
