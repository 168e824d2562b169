#!/usr/bin/env bash
# vescale-plan --calibrate --config llama_tiny under vescale-run with 2 ranks: the profile it
# writes has a GEMM curve, each collective's link figures, and the per-operation cost, the
# elementwise rate (from llama_tiny's own block) and the collective wait read from blocks run as
# training runs them, all fitted on this machine; it loads as --device, and plans llama_tiny
# over 2 ranks with it.
# Usage: calibrate_test.sh vescale-run vescale-plan
set -euo pipefail
run=$1 plan=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
timeout 300 "$run" --nproc-per-node 2 -- "$plan" --calibrate "$dir/here.json" --device-name here \
  --config llama_tiny \
  > "$dir/calibrate.log" 2>&1 || { cat "$dir/calibrate.log"; exit 1; }
grep -q "wrote $dir/here.json" "$dir/calibrate.log" || { cat "$dir/calibrate.log"; exit 1; }
python3 - "$dir/here.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["name"] == "here", p["name"]
for k in ("peak_flops", "gemm_half_work", "memory_bandwidth", "memory_bytes"):
    assert p[k] > 0, (k, p[k])
# A CPU core does between 1 GFLOP/s and 10 TFLOP/s; an all-reduce over loopback between
# 10 MB/s and 1 TB/s with a step latency under 10 ms.
assert 1e9 < p["peak_flops"] < 1e13, p["peak_flops"]
assert 1e7 < p["intra_node"]["bandwidth"] < 1e12, p["intra_node"]
assert 0 <= p["intra_node"]["latency"] < 1e-2, p["intra_node"]
assert "measured" in p["sources"]["intra_node"], p["sources"]
# Each collective fitted on its own, and a CPU's fp32 peak is the measured (fp32) one.
for c in ("all_gather", "reduce_scatter", "all_to_all"):
    f = p["intra_node"][c]
    assert 1e7 < f["bandwidth"] < 1e12 and 0 <= f["latency"] < 1e-2, (c, f)
assert p["fp32_peak_flops"] == p["peak_flops"], p
assert p["attention_keeps_probabilities"] is True, p
assert 0 < p["op_overhead"] < 1e-3, p["op_overhead"]
# The blocks: llama_tiny's own for the elementwise rate, run as DTensors under the launcher.
assert "the planned model's own llama block" in p["sources"]["memory_bandwidth"], p["sources"]
assert "run as training runs it" in p["sources"]["op_overhead"], p["sources"]
assert 0 <= p["collective_wait"] < 0.05, p["collective_wait"]
assert "tensor parallelism" in p["sources"]["collective_wait"], p["sources"]
print("calibrated:", {k: p[k] for k in ("peak_flops", "gemm_half_work", "memory_bandwidth")}, p["intra_node"])
PY
"$plan" --config llama_tiny --gpus 2 --gpus-per-node 2 --global-batch-size 8 --device "$dir/here.json" \
  --top 2 > "$dir/plan.log" 2>&1 || { cat "$dir/plan.log"; exit 1; }
grep -q "here x 2" "$dir/plan.log" && grep -q "^1 " "$dir/plan.log" || { cat "$dir/plan.log"; exit 1; }
echo "calibrate: ok"
