#!/usr/bin/env bash
# The copies in memory when two neighbouring nodes are lost at once (docs/fault_tolerance.md):
# three launchers ("nodes" on 127.0.0.2), 1 rank each (dp=-1), --nnodes 1:3, a copy in memory
# every 2 steps and a checkpoint every 7. kill -9 of the second and third launchers: the second
# node's part lived in its own memory and the third's, so the first node, alone, warns and
# resumes from the folder instead, at dp=1 with the same global batch; its losses follow an
# uninterrupted one-rank run within 1e-5 relative.
# Usage: in_memory_fallback_test.sh vescale-train
set -euo pipefail
train=$1
source "$(dirname "$0")/launch_common.sh"
fault_test_setup
args=(--config "$root/configs/llama_tiny.json" --set train.seq_len=32 --set train.global_batch_size=6
      --set train.micro_batch_size=2 --set train.steps=30 --set train.log_every=1
      --set 'parallel.mesh={"dp":-1}')

"$train" "${args[@]}" --set log.metrics_jsonl=\"$dir/reference.jsonl\" > "$dir/reference.log" 2>&1 \
  || { cat "$dir/reference.log"; echo "the one-rank run failed" >&2; exit 1; }

port=$(free_port)
node() {  # node LOG: one launcher of 1 rank
  exec "$train" "${args[@]}" --nproc-per-node 1 --master-addr 127.0.0.2 --master-port "$port" \
    --nnodes 1:3 --max-restarts 1 --rdzv-last-call 3 --set checkpoint.dir=\"$dir/ck\" \
    --set checkpoint.every=7 --set checkpoint.in_memory_every=2 \
    --set log.metrics_jsonl=\"$dir/run.jsonl\" > "$1" 2>&1
}
node "$dir/a.log" &
a=$!
sleep 1  # a serves the rendezvous
node "$dir/b.log" &
b=$!
node "$dir/c.log" &
c=$!
wait_for_steps "$dir/run.jsonl" 9 180 "$dir/a.log"  # copies at 8, 10, 12 beat the folder's 7
kill -9 "$b" "$c"
wait "$a" || { cat "$dir/a.log"; echo "the remaining node failed" >&2; exit 1; }
for want in "round 0: node 0 of 3" "round 1: node 0 of 1, ranks 0..0 of 1" \
            "the launchers' memory lost parts of its copy after step [0-9]* (two neighbouring nodes gone?): resuming from .*ck/step-[0-9]* instead" \
            "resumed from .*ck/step-"; do
  grep -q "$want" "$dir/a.log" || { cat "$dir/a.log"; echo "missing: $want" >&2; exit 1; }
done
close_losses "$dir/reference.jsonl" "$dir/run.jsonl"
echo "in-memory fallback: ok"
