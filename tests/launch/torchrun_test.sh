#!/usr/bin/env bash
# vescale-train launched by PyTorch's real torchrun, as users launch it: 2 ranks under the
# elastic agent (which serves the rendezvous store itself: every rank joins it as a client),
# with the default static rendezvous and with --rdzv-backend c10d. The losses must equal the
# same config launched by vescale-train --nproc-per-node 2, and each rank logs the agent's run id.
# Usage: torchrun_test.sh vescale-train torchrun
set -euo pipefail
train=$1 torchrun=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/launch_common.sh"
reference_run "$dir"

port=$(free_port)
"$torchrun" --nproc-per-node 2 --master-port "$port" --no-python \
  "$train" "${TRAIN_ARGS[@]}" --set log.metrics_jsonl=\"$dir/static.jsonl\" > "$dir/static.log" 2>&1 \
  || { cat "$dir/static.log"; echo "torchrun (static rendezvous) failed" >&2; exit 1; }
grep -q "launched by torchrun (run id .*the agent's store)" "$dir/static.log" \
  || { cat "$dir/static.log"; echo "no torchrun launch line" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/static.jsonl"

port=$(free_port)
"$torchrun" --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id vescale-test \
  --no-python "$train" "${TRAIN_ARGS[@]}" --set log.metrics_jsonl=\"$dir/c10d.jsonl\" > "$dir/c10d.log" 2>&1 \
  || { cat "$dir/c10d.log"; echo "torchrun (c10d rendezvous) failed" >&2; exit 1; }
grep -q "launched by torchrun (run id vescale-test" "$dir/c10d.log" \
  || { cat "$dir/c10d.log"; echo "no run id in the launch line" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/c10d.jsonl"
echo "torchrun: ok"
