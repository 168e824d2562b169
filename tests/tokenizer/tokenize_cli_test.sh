#!/usr/bin/env bash
# vescale-tokenize from the command line: clear errors (missing, binary, unsupported tokenizer),
# and ids equal to the library's encode of the whole text (one chunk, one thread) whatever the
# chunks and threads, and equal to HF tokenizers' (test-only Python), with the val split.
#   tokenize_cli_test.sh VESCALE_TOKENIZE PYTHON SOURCE_DIR HF_TOKENIZER_DIR
set -euo pipefail
tokenize=$1 python=$2 src=$3 hf=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fails_with() {  # fails_with "message" args...: exit 1 and the message on stderr
  local want=$1
  shift
  if "$tokenize" "$@" > "$dir/out" 2> "$dir/err"; then echo "expected a failure: $*" >&2; exit 1; fi
  grep -qF -- "$want" "$dir/err" || { echo "missing '$want' in: $(cat "$dir/err")" >&2; exit 1; }
}
fails_with "cannot open '/nonexistent/a.txt': No such file or directory" --input /nonexistent/a.txt --output "$dir/x"
printf 'text\0more' > "$dir/image.dat"
fails_with "'$dir/image.dat' looks binary, not text (a NUL byte at offset 4)" --input "$dir/image.dat" --output "$dir/x"
fails_with "is not a regular file" --input "$dir" --output "$dir/x"
fails_with "cannot open '$dir/none.json'" --tokenizer "$dir/none.json" --input "$src/data/corpus.txt" --output "$dir/x"
echo '{"model": {"type": "WordPiece", "vocab": {}}}' > "$dir/wordpiece.json"
fails_with "model.type 'WordPiece' is not supported" --tokenizer "$dir/wordpiece.json" --input "$src/data/corpus.txt" --output "$dir/x"

# Two inputs, concatenated: the corpus and the Unicode stress text.
inputs=("$src/data/corpus.txt" "$hf/stress.txt")
for tok in "$src/data/tokenizer_bpe2048.json" "$hf/llama3.json" ""; do
  flag=()
  [ -n "$tok" ] && flag=(--tokenizer "$tok")
  "$tokenize" "${flag[@]}" --input "${inputs[@]}" --output "$dir/one" --threads 1 --chunk-bytes 100000000 > "$dir/one.log"
  "$tokenize" "${flag[@]}" --input "${inputs[@]}" --output "$dir/many" --threads 3 --chunk-bytes 4096 > "$dir/many.log"
  cmp "$dir/one_train.bin" "$dir/many_train.bin"
  cmp "$dir/one_val.bin" "$dir/many_val.bin"
  "$python" - "$tok" "$dir/one" "${inputs[@]}" <<'PY'
import struct, sys
tok, prefix, files = sys.argv[1], sys.argv[2], sys.argv[3:]
def ids(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    width = {20240520: 2, 20240801: 4}[magic]
    assert len(data) == 1024 + count * width, (path, len(data), count)
    return list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:]))
train, val = ids(prefix + "_train.bin"), ids(prefix + "_val.bin")
text = b"".join(open(f, "rb").read() for f in files)
if tok:
    from tokenizers import Tokenizer
    want = Tokenizer.from_file(tok).encode(text.decode("utf-8"), add_special_tokens=False).ids
else:
    want = list(text)
assert train + val == want, f"{tok or 'bytes'}: ids differ from the reference"
assert len(val) == int(len(want) * 0.05), (len(val), len(want))
print(f"{tok or 'bytes'}: {len(want)} ids equal, {len(val)} in val")
PY
done
grep -q "tokens (bytes)" "$dir/one.log"
echo "tokenize_cli: ok"
