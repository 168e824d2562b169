#!/usr/bin/env bash
# Runs the DTensor overhead benchmark (ours and PyTorch's Python DTensor, 2 Gloo ranks) and
# writes bench/results/dtensor_overhead.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
VENV=${VESCALE_VENV:-/opt/vescale/venv}
NPROC=${NPROC:-1}  # one rank: the overhead is per process, and a second rank on 2 cores adds noise
out=$(mktemp -d)
"$BUILD_DIR/apps/vescale-run" --nproc-per-node "$NPROC" -- "$BUILD_DIR/bench/dtensor_overhead" | sed 's/^\[rank 0\] //' | grep '^{' > "$out/ours.jsonl"
"$BUILD_DIR/apps/vescale-run" --nproc-per-node "$NPROC" -- "$VENV/bin/python" bench/dtensor_overhead.py 2>/dev/null | sed 's/^\[rank 0\] //' | grep '^{' > "$out/pytorch.jsonl"
"$VENV/bin/python" - "$out" <<'PY'
import json, platform, subprocess, sys, datetime, os
import torch
d = sys.argv[1]
ours = [json.loads(l) for l in open(os.path.join(d, "ours.jsonl"))]
py = {r["case"]: r for r in (json.loads(l) for l in open(os.path.join(d, "pytorch.jsonl")))}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
lines = [
    "# DTensor dispatch overhead",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores; {datetime.date.today()}; torch {torch.__version__}; "
    f"{ours[0]['world']} Gloo rank(s) on CPU, 1 thread each. Per-op wall time in µs, medians of 15 repetitions.",
    "Overhead = median over repetitions of (DTensor − plain local-tensor) time for the same op on the same shards,",
    "measured in alternating blocks so that drift hits both alike. Cache miss = the propagation cache cleared before every call.",
    "",
    "| op | plain | vescale (cache hit) | overhead hit | vescale (cache miss) | PyTorch DTensor | PyTorch overhead | PyTorch overhead / ours |",
    "|---|---|---|---|---|---|---|---|",
]
for r in ours:
    p = py.get(r["case"])
    ours_ovh = r["overhead_us"]
    if p:
        py_ovh = p["overhead_us"]
        ratio = f"{py_ovh / max(ours_ovh, 0.01):.1f}x"
        pcols = f"{p['hit_us']:.1f} | {py_ovh:.1f} | {ratio}"
    else:
        pcols = "n/a | n/a | n/a"
    lines.append(f"| {r['case']} | {r['plain_us']:.1f} | {r['hit_us']:.1f} | {ours_ovh:.1f} | {r['miss_us']:.1f} (+{r['miss_overhead_us']:.1f}) | {pcols} |")
lines += ["", "Reproduce: `bench/dtensor_overhead.sh` (NPROC=1 by default; NPROC=2 runs two Gloo ranks)."]
open("bench/results/dtensor_overhead.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
