#!/usr/bin/env bash
# vescale-train --max-restarts (docs/fault_tolerance.md), with real kills:
#  1. kill -9 of rank 1 mid-run: the launcher stops rank 0, starts both again, they resume from
#     `latest`, and the run's losses and gradient norms equal an uninterrupted run's bitwise;
#     the launcher says which rank failed, at which step, and where it resumes;
#  2. a hung rank (SIGSTOP) counts as failed once its peer's collective times out: restarted too;
#  3. a config error with --max-restarts 3 fails once (exit 2), not four times; so does a world
#     that cannot divide the global batch.
# Usage: restart_test.sh vescale-train
set -euo pipefail
train=$1
source "$(dirname "$0")/launch_common.sh"
fault_test_setup
args=("${TRAIN_ARGS[@]}" --set train.steps=30 --set checkpoint.every=3)

"$train" "${args[@]}" --nproc-per-node 2 --set checkpoint.dir=\"$dir/ref\" \
  --set log.metrics_jsonl=\"$dir/reference.jsonl\" > "$dir/reference.log" 2>&1 \
  || { cat "$dir/reference.log"; echo "the uninterrupted run failed" >&2; exit 1; }

"$train" "${args[@]}" --nproc-per-node 2 --max-restarts 2 --set checkpoint.dir=\"$dir/ck\" \
  --set log.metrics_jsonl=\"$dir/run.jsonl\" > "$dir/run.log" 2>&1 &
launcher=$!
# Past the second checkpoint (step 6), kill -9 the launcher's rank 1 (named by its argv[0]).
wait_for_steps "$dir/run.jsonl" 7 120 "$dir/run.log"
victim=""
for p in $(pgrep -P "$launcher"); do
  if tr '\0' ' ' < "/proc/$p/cmdline" | grep -q '^vescale-train\[rank 1\]'; then victim=$p; fi
done
[ -n "$victim" ] || { cat "$dir/run.log"; echo "rank 1 of the launcher not found" >&2; exit 1; }
kill -9 "$victim"
wait "$launcher" || { cat "$dir/run.log"; echo "the restarted run failed" >&2; exit 1; }
grep -q "vescale-run: restart 1/2 after rank 1 (pid $victim) failed with signal Killed at step [0-9]*; resuming from step [0-9]*" "$dir/run.log" \
  || { cat "$dir/run.log"; echo "no restart line naming rank 1, its step and the resume step" >&2; exit 1; }
grep -q "restart 1 of 2, the agent's store" "$dir/run.log" \
  || { cat "$dir/run.log"; echo "the restarted ranks do not say they are restart 1 of 2" >&2; exit 1; }
grep -q "resumed from .*ck/step-" "$dir/run.log" \
  || { cat "$dir/run.log"; echo "the restarted ranks did not resume from a checkpoint" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/run.jsonl"

# 2. A hung rank: its peer's collective times out (5 s here), the launcher kills it and restarts.
VESCALE_COLLECTIVE_TIMEOUT_S=5 "$train" "${args[@]}" --nproc-per-node 2 --max-restarts 1 \
  --grace-seconds 1 --set checkpoint.dir=\"$dir/hung\" --set log.metrics_jsonl=\"$dir/hung.jsonl\" \
  > "$dir/hung.log" 2>&1 &
launcher=$!
wait_for_steps "$dir/hung.jsonl" 7 120 "$dir/hung.log"
for p in $(pgrep -P "$launcher"); do
  if tr '\0' ' ' < "/proc/$p/cmdline" | grep -q '^vescale-train\[rank 1\]'; then kill -STOP "$p"; fi
done
wait "$launcher" || { cat "$dir/hung.log"; echo "the run with a hung rank did not recover" >&2; exit 1; }
grep -q "did not finish within 5000 ms: rank 1 did not answer" "$dir/hung.log" \
  && grep -q "restart 1/1 after rank 0 .* failed with exit code 1" "$dir/hung.log" \
  || { cat "$dir/hung.log"; echo "the hung rank was not found by the timeout and restarted" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/hung.jsonl"

# 3. A config error is not restarted: one failure, exit 2.
set +e
"$train" "${args[@]}" --nproc-per-node 2 --max-restarts 3 --set train.steps=-1 > "$dir/bad.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] || { cat "$dir/bad.log"; echo "a config error exited $code, not 2" >&2; exit 1; }
starts=$(grep -c "train.steps" "$dir/bad.log" || true)
if grep -q "restart 1/" "$dir/bad.log" || [ "$starts" -gt 2 ]; then
  cat "$dir/bad.log"; echo "a config error was restarted" >&2; exit 1
fi
grep -q "not restarting: rank [01] .* exit code 2, which says its input" "$dir/bad.log" \
  || { cat "$dir/bad.log"; echo "the launcher does not say why it does not restart" >&2; exit 1; }
# A world that cannot divide the global batch is refused the same way (an elastic world that
# shrank to it stops there, with the message).
set +e
"$train" "${args[@]}" --nproc-per-node 2 --max-restarts 3 --set train.global_batch_size=6 \
  > "$dir/batch.log" 2>&1  # 6 sequences over 2 data ranks of 2
code=$?
set -e
[ "$code" = 2 ] && grep -q "train.global_batch_size=6 is not a multiple" "$dir/batch.log" && ! grep -q "restart 1/" "$dir/batch.log" \
  || { cat "$dir/batch.log"; echo "a global batch the world cannot divide was not refused once (exit $code)" >&2; exit 1; }
echo "restarts: ok"
