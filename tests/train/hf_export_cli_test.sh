#!/usr/bin/env bash
# vescale-convert as a user drives it: a BPE run's Hugging Face export carries its tokenizer
# (tokenizer.json, tokenizer_config.json, generation_config.json) so transformers' AutoTokenizer
# and vescale-generate --hf read the folder alone; a byte-level run's export warns of nothing;
# neither direction overwrites what the destination holds without --overwrite; vescale-generate
# says why it stopped early and ends the text's line.
# Usage: hf_export_cli_test.sh vescale-train vescale-convert vescale-generate python
set -euo pipefail
train=$1 convert=$2 generate=$3 python=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(cd "$(dirname "$0")/../.." && pwd)"
small=(--set train.batch_size=2 --set train.seq_len=32 --set train.steps=2 --set log.metrics_jsonl=\"\"
       --set train.sample_every=0)
fail() { echo "FAILED: $*" >&2; exit 1; }
expect_error() { if "$@" > "$dir/out" 2>&1; then fail "expected an error from: $*"; fi; }

# A BPE run (the shipped 2048-token vocabulary) and its export.
"$train" --config "$root/configs/llama_tiny_bpe.json" "${small[@]}" --set checkpoint.dir=\"$dir/bpe\" \
  > "$dir/bpe.log" 2>&1 || { cat "$dir/bpe.log"; fail "training llama_tiny_bpe"; }
"$convert" --checkpoint "$dir/bpe" --to-hf "$dir/hf" > "$dir/convert.log" 2>&1 || { cat "$dir/convert.log"; fail "export"; }
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  [ -f "$dir/hf/$f" ] || fail "the export lacks $f"
done
cmp "$dir/hf/tokenizer.json" "$root/data/tokenizer_bpe2048.json"
"$python" - "$dir/hf" "$root/data/tokenizer_bpe2048.json" <<'PY'
import json, sys
from tokenizers import Tokenizer
from transformers import AutoTokenizer
hf, original = sys.argv[1:]
tok = AutoTokenizer.from_pretrained(hf)
text = "In the beginning God created the heaven and the earth."
want = Tokenizer.from_file(original).encode(text).ids
got = tok.encode(text)
assert got == want, (got, want)
assert tok.eos_token == "<|endoftext|>", tok.eos_token
gen = json.load(open(f"{hf}/generation_config.json"))
assert gen["eos_token_id"] == 0, gen
print(f"AutoTokenizer: {len(got)} ids equal the tokenizer's, eos {tok.eos_token}")
PY
# vescale-generate --hf takes the folder's tokenizer; 300 tokens do not fit max_seq_len 128.
"$generate" --hf "$dir/hf" --prompt "In the beginning" --max-new-tokens 300 --seed 1 \
  > "$dir/text" 2> "$dir/gen.err" || { cat "$dir/gen.err"; fail "vescale-generate --hf"; }
grep -q "tokenizer $dir/hf/tokenizer.json" "$dir/gen.err" || { cat "$dir/gen.err"; fail "the folder's tokenizer was not used"; }
grep -Eq "stopped at (max_seq_len 128: [0-9]+ of 300 tokens|an end-of-text token: [0-9]+ of 300 tokens)" "$dir/gen.err" \
  || { cat "$dir/gen.err"; fail "no reason for stopping early"; }
[ "$(tail -c 1 "$dir/text" | od -An -c | tr -d ' ')" = '\n' ] || fail "the text does not end its line"

# --to-hf into a folder that holds a model: refused; --overwrite removes the stale files first.
expect_error "$convert" --checkpoint "$dir/bpe" --to-hf "$dir/hf"
grep -q "is not empty; a second model's files beside the first's would mix them" "$dir/out" || { cat "$dir/out"; fail; }
echo stale > "$dir/hf/model-00001-of-00002.safetensors"
echo '{}' > "$dir/hf/model.safetensors.index.json"
echo notes > "$dir/hf/README.md"
"$convert" --checkpoint "$dir/bpe" --to-hf "$dir/hf" --overwrite > /dev/null
[ ! -e "$dir/hf/model-00001-of-00002.safetensors" ] && [ ! -e "$dir/hf/model.safetensors.index.json" ] \
  || fail "--overwrite left another model's files"
[ -f "$dir/hf/README.md" ] || fail "--overwrite removed a file that is not a model's"
"$generate" --hf "$dir/hf" --prompt hi --max-new-tokens 4 > /dev/null 2>&1 || fail "the overwritten export does not load"

# --to-checkpoint into a training root: refused, latest untouched; --overwrite replaces them.
before=$(cat "$dir/bpe/latest")
expect_error "$convert" --from-hf "$dir/hf" --to-checkpoint "$dir/bpe"
grep -q "already holds checkpoints (latest: $dir/bpe/$before); writing there would repoint its latest" "$dir/out" \
  || { cat "$dir/out"; fail; }
[ "$(cat "$dir/bpe/latest")" = "$before" ] || fail "latest moved"
"$convert" --from-hf "$dir/hf" --to-checkpoint "$dir/bpe" --overwrite > /dev/null
[ "$(cat "$dir/bpe/latest")" = "step-00000000" ] && [ ! -d "$dir/bpe/$before" ] || fail "--overwrite"

# A byte-level run: no tokenizer to copy, and nothing to warn about.
"$train" --config "$root/configs/llama_tiny.json" "${small[@]}" --set checkpoint.dir=\"$dir/bytes\" > /dev/null 2>&1
"$convert" --checkpoint "$dir/bytes" --to-hf "$dir/hf_bytes" > "$dir/bytes.log" 2>&1
! grep -q "which is not there" "$dir/bytes.log" || { cat "$dir/bytes.log"; fail "a warning for a byte-level run"; }
[ -f "$dir/hf_bytes/generation_config.json" ] && [ ! -e "$dir/hf_bytes/tokenizer.json" ] || fail "byte-level export files"
echo "hf export cli: ok"
