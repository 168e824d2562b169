#!/usr/bin/env bash
# Builds bench/timeline_bench and runs it RUNS times at 2 ranks under DP=2 and under TP=2
# (vescale-run, Gloo on CPU, one thread per rank): llama_tiny's step time with the timeline
# recording vs not (paired blocks in one run), the spans and merged-trace bytes per step, and
# the end-of-window cost. Prints each run's JSON line and the medians.
# Knobs: RUNS (3), TIMELINE_ARGS (passed to timeline_bench, e.g. "--rounds 8 --steps 4").
source "$(dirname "$0")/bench_env.sh"
TIMELINE_ARGS=${TIMELINE_ARGS:-"--rounds 6 --steps 3"}
bench_build timeline_bench
out=$(mktemp)
for mesh in dp tp; do
  for run in $(seq 1 "$RUNS"); do
    # shellcheck disable=SC2086
    "$BUILD_DIR/apps/vescale-run" --nproc-per-node 2 -- "$BUILD_DIR/bench/timeline_bench" \
      --mesh "$mesh" $TIMELINE_ARGS | sed 's/^\[rank 0\] //' | grep '^{' | tee -a "$out"
  done
done
"$VENV/bin/python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mesh in sorted({r["mesh"] for r in rows}):
    rs = [r for r in rows if r["mesh"] == mesh]
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{mesh}: median overhead {100 * med('overhead'):+.2f}% (runs: "
          + ", ".join(f"{100 * r['overhead']:+.2f}%" for r in rs)
          + f"), step {med('off_step_ms'):.1f} ms off / {med('on_step_ms'):.1f} ms on, "
          f"{med('spans_per_step_rank0'):.0f} spans/step on rank 0, "
          f"{med('trace_bytes_per_step') / 1024:.1f} KB of trace per step, "
          f"window end {med('window_end_ms'):.1f} ms")
PY
