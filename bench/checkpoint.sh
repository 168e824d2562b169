#!/usr/bin/env bash
# Builds bench/checkpoint_bench and runs it RUNS times at 4 ranks (vescale-run, Gloo on CPU):
# sync vs async save throughput of a 512 MB state, the async save's training stall as a share of
# the sync save, a resharding load's throughput, and each phase's peak host memory per rank.
# Knobs: RUNS (3), CHECKPOINT_ARGS (e.g. "--mb 1024 --rounds 3"), CHECKPOINT_DIR (/tmp/...).
source "$(dirname "$0")/bench_env.sh"
CHECKPOINT_ARGS=${CHECKPOINT_ARGS:-"--mb 512 --rounds 3"}
CHECKPOINT_DIR=${CHECKPOINT_DIR:-/tmp/vescale_checkpoint_bench}
bench_build checkpoint_bench
out=$(mktemp)
for run in $(seq 1 "$RUNS"); do
  # shellcheck disable=SC2086
  "$BUILD_DIR/apps/vescale-run" --nproc-per-node 4 -- "$BUILD_DIR/bench/checkpoint_bench" \
    --dir "$CHECKPOINT_DIR" $CHECKPOINT_ARGS | sed 's/^\[rank 0\] //' | grep '^{' | tee -a "$out"
done
"$VENV/bin/python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in ("sync_save_gb_s", "async_save_gb_s", "async_stall_ms", "sync_save_ms", "stall_over_sync",
          "load_gb_s", "sync_peak_mb_per_rank", "async_peak_mb_per_rank", "load_peak_mb_per_rank"):
    vals = [r[k] for r in rows]
    print(f"median {k}: {statistics.median(vals):.3f} (runs: {', '.join(f'{v:.3f}' for v in vals)})")
PY
