#!/usr/bin/env bash
# In-memory recovery (docs/fault_tolerance.md): two launchers ("nodes" on 127.0.0.2), 2 ranks
# each (dp=4), --nnodes 2, checkpoint.in_memory_every=2 and no checkpoint on disk before the
# end. kill -9 of the second launcher, then a new one in its place: the restarted world finds
# the killed node's copies in the first node's memory (the ring's neighbour), resumes from them
# with no checkpoint file to read, and its losses equal an uninterrupted run's bitwise.
# Usage: in_memory_test.sh vescale-train
set -euo pipefail
train=$1
source "$(dirname "$0")/launch_common.sh"
fault_test_setup
args=(--config "$root/configs/llama_tiny.json" --set train.seq_len=32 --set train.global_batch_size=8
      --set train.micro_batch_size=2 --set train.steps=40 --set train.log_every=1
      --set 'parallel.mesh={"dp":4}' --set checkpoint.every=1000)

"$train" "${args[@]}" --nproc-per-node 4 --set checkpoint.dir=\"$dir/ref\" \
  --set log.metrics_jsonl=\"$dir/reference.jsonl\" > "$dir/reference.log" 2>&1 \
  || { cat "$dir/reference.log"; echo "the uninterrupted run failed" >&2; exit 1; }

port=$(free_port)
node() {  # node LOG: one launcher of the job
  node_launcher "$1" --nnodes 2 --max-restarts 2 --set checkpoint.dir=\"$dir/ck\" \
    --set checkpoint.in_memory_every=2 --set log.metrics_jsonl=\"$dir/run.jsonl\"
}
node "$dir/a.log" &
a=$!
sleep 1  # a serves the rendezvous
node "$dir/b.log" &
b=$!
wait_for_steps "$dir/run.jsonl" 7 180 "$dir/a.log"
kill -9 "$b"
# Nothing on disk yet: the resume can only come from memory.
if ls "$dir/ck" | grep -q '^step-'; then ls "$dir/ck"; echo "a checkpoint reached the disk" >&2; exit 1; fi
node "$dir/c.log" &
c=$!
wait "$a" || { cat "$dir/a.log"; echo "the first node failed" >&2; exit 1; }
wait "$c" || { cat "$dir/c.log"; echo "the replacing node failed" >&2; exit 1; }
cat "$dir/a.log" "$dir/c.log" > "$dir/all.log"
grep -q "resumed from the launchers' memory (the copy after step [0-9]*) after step [1-9]" "$dir/all.log" \
  || { cat "$dir/all.log"; echo "the restart did not resume from memory" >&2; exit 1; }
grep -q "restart 1/2 after .* resuming from step [1-9]" "$dir/a.log" \
  || { cat "$dir/a.log"; echo "no restart line with the copy's step" >&2; exit 1; }
[ "$(ls "$dir/ck" | grep -c '^step-')" = 1 ] || { ls "$dir/ck"; echo "more than the final checkpoint on disk" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/run.jsonl"
echo "in-memory recovery: ok"
