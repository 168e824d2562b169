#!/usr/bin/env bash
# Builds bench/moe_bench and runs it RUNS times at 4 ranks (vescale-run, Gloo on CPU, one thread
# per rank): EP=4 vs replicated experts (paired rounds), the token all-to-alls' calls and bytes
# per step, and grouped_mm vs a per-expert loop. Prints each run's JSON line and the medians.
# Knobs: RUNS (3), MOE_ARGS (passed to moe_bench, e.g. "--rounds 5 --dim 256").
source "$(dirname "$0")/bench_env.sh"
MOE_ARGS=${MOE_ARGS:-"--rounds 5"}
bench_build moe_bench
out=$(mktemp)
for run in $(seq 1 "$RUNS"); do
  # shellcheck disable=SC2086
  "$BUILD_DIR/apps/vescale-run" --nproc-per-node 4 -- "$BUILD_DIR/bench/moe_bench" $MOE_ARGS |
    sed 's/^\[rank 0\] //' | grep '^{' | tee -a "$out"
done
"$VENV/bin/python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in ("ep_over_replicated", "grouped_over_loop", "ep_step_ms", "replicated_step_ms"):
    print(f"median {k}: {statistics.median(r[k] for r in rows):.3f}")
PY
