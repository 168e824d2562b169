#!/usr/bin/env bash
# Generation through the command line. llama_tiny trains 30 steps at TP=2 with a checkpoint and
# train.sample_every: the sample it prints (weights gathered from the TP shards) equals
# vescale-generate's text from the checkpoint resharded to one process with the same seed; greedy
# and sampled ids from the checkpoint equal those from its Hugging Face export; bad input is named.
# Usage: generate_cli_test.sh vescale-train vescale-generate vescale-convert
set -euo pipefail
train=$1 generate=$2 convert=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(dirname "$0")/../.."
"$train" --config "$root/configs/llama_tiny.json" --set train.batch_size=4 --set train.seq_len=64 \
  --set log.metrics_jsonl=\"\" --set train.steps=30 --set train.log_every=10 \
  --nproc-per-node 2 --set 'parallel.mesh={"tp":2}' --set parallel.plan=\"$root/configs/plans/llama_tp.json\" \
  --set train.sample_every=30 --set train.sample_tokens=24 --set train.sample_temperature=0.8 \
  --set train.sample_prompt=\"In\ the\ beginning\" --set checkpoint.dir=\"$dir/ckpt\" > "$dir/train.log" 2>&1 \
  || { cat "$dir/train.log"; exit 1; }
# The sample: the lines after "sample at step 30:" up to the next log line (rank 0's lines come
# through the launcher with a "[rank 0] " prefix).
python3 - "$dir/train.log" > "$dir/sample.txt" <<'PY'
import re, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
lines = [l[len(b"[rank 0] "):] for l in lines if l.startswith(b"[rank 0] ")]
start = next((i for i, l in enumerate(lines) if l.endswith(b"sample at step 30:")), None)
if start is None:
    sys.exit("no sample in the training log")
body = []
for l in lines[start + 1:]:
    if re.match(rb"\d\d:\d\d:\d\d\.\d{3} \w+ ", l):
        break
    body.append(l)
sys.stdout.buffer.write(b"\n".join(body))
PY
"$generate" --checkpoint "$dir/ckpt" --prompt "In the beginning" --max-new-tokens 24 \
  --temperature 0.8 --seed 1234 > "$dir/generated.txt" 2> "$dir/generate.err" || { cat "$dir/generate.err"; exit 1; }
printf '%s' "$(cat "$dir/generated.txt")" > "$dir/generated.trim"
printf '%s' "$(cat "$dir/sample.txt")" > "$dir/sample.trim"
echo "sample at TP=2:   $(cat "$dir/sample.trim" | head -c 200)"
echo "vescale-generate: $(cat "$dir/generated.trim" | head -c 200)"
cmp "$dir/sample.trim" "$dir/generated.trim"
grep -q "In the beginning" "$dir/generated.trim"
[ "$(wc -c < "$dir/generated.trim")" -gt 20 ]
# The same weights through the Hugging Face export: the same greedy and sampled ids.
"$convert" --checkpoint "$dir/ckpt" --to-hf "$dir/hf" > /dev/null
for opts in "--greedy" "--temperature 1.0 --top-k 20 --top-p 0.9 --seed 5"; do
  # shellcheck disable=SC2086
  a=$("$generate" --checkpoint "$dir/ckpt" --prompt-ids 73,110,32,116,104,101 --max-new-tokens 40 $opts --print-ids 2>/dev/null)
  # shellcheck disable=SC2086
  b=$("$generate" --hf "$dir/hf" --prompt-ids 73,110,32,116,104,101 --max-new-tokens 40 $opts --print-ids 2>/dev/null)
  echo "$opts: $a"
  [ "$a" = "$b" ] || { echo "checkpoint and HF export differ: $a vs $b" >&2; exit 1; }
  [ "$(echo "$a" | tr ',' '\n' | wc -l)" -eq 40 ]
done
# Bad input is named.
expect_error() {
  if "$@" > "$dir/bad" 2>&1; then echo "expected an error from: $*" >&2; exit 1; fi
}
expect_error "$generate" --checkpoint "$dir/nothing"
grep -q "is neither a checkpoint folder (index.json) nor a root with \`latest\`" "$dir/bad"
expect_error "$generate" --prompt hi
grep -q "give --checkpoint" "$dir/bad"
expect_error "$generate" --checkpoint "$dir/ckpt" --top-p 0
grep -q -- "--top-p: must be in (0, 1]" "$dir/bad"
echo "generate cli: ok"
