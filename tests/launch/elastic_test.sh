#!/usr/bin/env bash
# An elastic world (docs/fault_tolerance.md): two launchers ("nodes" on 127.0.0.2), 2 ranks
# each, --nnodes 1:2, a dp=-1 mesh and a fixed global batch. kill -9 of the second launcher:
# the first re-forms the world alone (dp=2, twice the micro-batches per rank) and resumes from
# the latest checkpoint; then a launcher joins again: the running ranks stop after a step with a
# checkpoint and the world grows back to dp=4. Every step's loss follows an uninterrupted dp=4
# run within 1e-5 relative (the same samples; only the reduction's grouping changes).
# Usage: elastic_test.sh vescale-train
set -euo pipefail
train=$1
source "$(dirname "$0")/launch_common.sh"
fault_test_setup
args=(--config "$root/configs/llama_tiny.json" --set train.seq_len=32 --set train.global_batch_size=8
      --set train.micro_batch_size=2 --set train.steps=40 --set train.log_every=1
      --set 'parallel.mesh={"dp":-1}' --set checkpoint.every=2)

"$train" "${args[@]}" --nproc-per-node 4 --set log.metrics_jsonl=\"$dir/reference.jsonl\" \
  > "$dir/reference.log" 2>&1 || { cat "$dir/reference.log"; echo "the dp=4 run failed" >&2; exit 1; }

port=$(free_port)
node() {  # node LOG: one launcher of the elastic job
  node_launcher "$1" --nnodes 1:2 --max-restarts 2 --rdzv-last-call 3 \
    --set checkpoint.dir=\"$dir/ck\" --set log.metrics_jsonl=\"$dir/run.jsonl\"
}
node "$dir/a.log" &
a=$!
sleep 1  # a serves the rendezvous
node "$dir/b.log" &
b=$!
wait_for_steps "$dir/run.jsonl" 5 180 "$dir/a.log"
kill -9 "$b"
# a goes on alone (dp=2): let it take a few steps, then a node joins again.
deadline=$((SECONDS + 180))
until grep -q "round 1: node 0 of 1" "$dir/a.log"; do
  [ $SECONDS -lt $deadline ] || { cat "$dir/a.log"; echo "no smaller world within 180 s" >&2; exit 1; }
  sleep 0.2
done
resumed=$(grep -c '"loss"' "$dir/run.jsonl" || true)
wait_for_steps "$dir/run.jsonl" $((resumed + 4)) 180 "$dir/a.log"
node "$dir/c.log" &
c=$!
wait "$a" || { cat "$dir/a.log"; echo "the first node failed" >&2; exit 1; }
wait "$c" || { cat "$dir/c.log"; echo "the joining node failed" >&2; exit 1; }
cat "$dir/a.log" "$dir/c.log" > "$dir/all.log"
for want in "round 0: node [01] of 2, ranks [0-9]*..[0-9]* of 4" \
            "restart 1/2 after .* at step [0-9]*; resuming from step [0-9]*" \
            "round 1: node 0 of 1, ranks 0..1 of 2" \
            "a node is waiting to join" \
            "round 2: node [01] of 2, ranks [0-9]*..[0-9]* of 4" \
            "SIGTERM: stopped after step [0-9]* with a checkpoint" \
            "DeviceMesh(dp=2; " "DeviceMesh(dp=4; "; do
  grep -q "$want" "$dir/all.log" || { cat "$dir/all.log"; echo "missing from the launchers' logs: $want" >&2; exit 1; }
done
close_losses "$dir/reference.jsonl" "$dir/run.jsonl"
echo "elastic: ok"
