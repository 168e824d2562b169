# Shared by the launcher tests (sourced): one tiny 2-rank llama_tiny run (dp=2, a few steps)
# started by vescale-train's own launcher, the reference every other launcher must match
# bitwise: same math, same losses and gradient norms.
#   reference_run DIR          -> DIR/reference.jsonl
#   same_losses A.jsonl B.jsonl   exits 1 naming the first step that differs
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAIN_ARGS=(--config "$root/configs/llama_tiny.json" --set train.batch_size=2 --set train.seq_len=32
            --set train.steps=4 --set train.log_every=1 --set 'parallel.mesh={"dp":2}')

reference_run() {
  "$train" "${TRAIN_ARGS[@]}" --nproc-per-node 2 --set log.metrics_jsonl=\"$1/reference.jsonl\" \
    > "$1/reference.log" 2>&1 || { cat "$1/reference.log"; echo "the reference run failed" >&2; exit 1; }
}

same_losses() {
  python3 - "$1" "$2" <<'PY'
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:3]]
a, b = rows
if len(a) != len(b) or not a:
    sys.exit(f"{len(a)} steps in {sys.argv[1]}, {len(b)} in {sys.argv[2]}")
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        if x[k] != y[k]:
            sys.exit(f"step {x['step']}: {k} {x[k]!r} vs {y[k]!r}")
print(f"{len(a)} steps, losses {[r['loss'] for r in a]} equal bitwise")
PY
}

# close_losses A.jsonl B.jsonl: the same steps, every loss within 1e-5 relative (another layout
# of the same math: only the reductions' grouping differs); exits 1 naming the worst.
close_losses() {
  python3 - "$1" "$2" <<'PY'
import json, sys
ref, run = ({r["step"]: r for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3])
if sorted(run) != sorted(ref):
    sys.exit(f"steps {sorted(run)} vs {sorted(ref)}")
worst = max(abs(run[s]["loss"] - ref[s]["loss"]) / abs(ref[s]["loss"]) for s in ref)
if worst > 1e-5:
    sys.exit(f"a loss differs by {worst:.2e} relative")
print(f"{len(ref)} steps, losses within {worst:.1e} relative")
PY
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for_steps FILE N SECONDS LOG: until FILE (a metrics JSONL) holds N steps; fails showing
# LOG when SECONDS pass first.
wait_for_steps() {
  local deadline=$((SECONDS + $3))
  until [ -f "$1" ] && [ "$(grep -c '"loss"' "$1")" -ge "$2" ]; do
    if [ $SECONDS -ge $deadline ]; then
      cat "$4"; echo "$1 did not reach $2 steps within $3 s" >&2; exit 1
    fi
    sleep 0.2
  done
}

# The fault tests' scratch folder $dir (kept with KEEP=1); launchers they started in the
# background die with them; collectives time out in a minute, not ten.
fault_test_setup() {
  dir=$(mktemp -d)
  trap 'kill -9 $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
  export VESCALE_COLLECTIVE_TIMEOUT_S=60
}

# node_launcher LOG ARGS...: one "node" of a job on 127.0.0.2:$port, 2 ranks of $train with
# "${args[@]}" and ARGS. Run it in the background: exec makes $! the launcher itself.
node_launcher() {
  local log=$1
  shift
  exec "$train" "${args[@]}" --nproc-per-node 2 --master-addr 127.0.0.2 --master-port "$port" \
    "$@" > "$log" 2>&1
}
