#!/usr/bin/env bash
# scripts/plot-metrics draws a PNG and an SVG from a metrics JSONL, and names a bad line.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
plot="$(dirname "$0")/../../scripts/plot-metrics"
printf '%s\n' '{"step": 1, "loss": 5.5, "lr": 0.001, "grad_norm": 1.0}' \
              '{"step": 2, "loss": 4.9, "lr": 0.002, "grad_norm": 1.0, "val_loss": 5.0}' > "$dir/m.jsonl"
"$plot" "$dir/m.jsonl" | grep -q "2 steps -> $dir/m.png"
[ "$(head -c 4 "$dir/m.png" | tail -c 3)" = "PNG" ]
"$plot" "$dir/m.jsonl" -o "$dir/m.svg" >/dev/null
grep -q "<svg" "$dir/m.svg"
echo 'not json' >> "$dir/m.jsonl"
if "$plot" "$dir/m.jsonl" 2> "$dir/err"; then echo "expected a failure" >&2; exit 1; fi
grep -q "m.jsonl:3: not JSON" "$dir/err"
echo "plot-metrics: ok"
