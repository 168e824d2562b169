#!/usr/bin/env bash
# Context parallelism trains like one device (issue 35): one config, unchanged but for the mesh
# and the plan, trained 10 steps at 1 rank and at cp=2 (ring, zigzag), cp=4 (all-gather, plain
# chunks), cp x tp (with and without sequence parallelism), pp x cp, cp x dp with ZeRO-1 and
# ZeRO-3, and a Mixtral at cp x ep: every step's loss, and every parameter at the end (the
# Hugging Face export of the last checkpoint, each tensor's difference in norm), within 1e-5
# relative of the 1-rank run. A checkpoint saved at cp=2 loads at cp=1 and tp=2 bitwise. Each
# rank's activations at 2048 tokens fall to about 1/cp of one device's. Then the errors, before any rank starts: a sequence that does not
# divide into 2cp chunks, a model without attention cores (GPT), cp not next to dp, a plan's
# context dim the mesh lacks.
# Usage: context_parallel_test.sh path/to/vescale-train path/to/vescale-convert python
set -uo pipefail
train=$1 convert=$2 python=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root="$(cd "$(dirname "$0")/../.." && pwd)"
plans=$root/configs/plans
# 4 sequences of 32 tokens per step (8 zigzag chunks of 4 at cp=4).
fixed=(--set train.global_batch_size=4 --set train.micro_batch_size=2 --set train.seq_len=32
       --set train.steps=10 --set train.log_every=1 --set train.warmup_steps=1
       --set train.eval_every=0 --set train.sample_every=0)
run() {  # run NAME RANKS CONFIG [--set ...]: trains, then exports the last checkpoint
  local name=$1 ranks=$2 config=$3
  shift 3
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(--nproc-per-node "$ranks")
  timeout 300 "$train" --config "$root/configs/$config.json" "${launch[@]}" "${fixed[@]}" \
    --set log.metrics_jsonl=\""$dir/$name.jsonl"\" --set checkpoint.dir=\""$dir/$name.ckpt"\" "$@" \
    > "$dir/$name.log" 2>&1 \
    || { tail -n 30 "$dir/$name.log"; echo "context parallel: the $name run failed" >&2; exit 1; }
  "$convert" --checkpoint "$dir/$name.ckpt" --to-hf "$dir/$name.hf" > "$dir/$name.convert" 2>&1 \
    || { cat "$dir/$name.convert"; echo "context parallel: exporting $name failed" >&2; exit 1; }
}
# Losses and final parameters as the reference's within 1e-5 relative.
same() {  # same REFERENCE NAME...
  "$python" - "$dir" "$@" <<'PY' || exit 1
import json, struct, sys
from array import array
d, ref, names = sys.argv[1], sys.argv[2], sys.argv[3:]
def losses(n):
    return [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if '"loss"' in l]
def params(n):  # safetensors: 8-byte header size, JSON header, raw little-endian data
    blob = open(f"{d}/{n}.hf/model.safetensors", "rb").read()
    size = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + size])
    out = {}
    for k, v in header.items():
        if k == "__metadata__": continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = array("f", blob[8 + size + a:8 + size + b])
    return out
want, want_p = losses(ref), params(ref)
assert len(want) == 10, f"{ref}: {len(want)} steps"
for n in names:
    got = losses(n)
    rel = max(abs(a - b) / abs(b) for a, b in zip(got, want)) if len(got) == len(want) else None
    if rel is None or rel > 1e-5:
        sys.exit(f"context parallel: {n}'s losses {got} differ from {ref}'s {want} (max relative {rel})")
    got_p = params(n)
    assert got_p.keys() == want_p.keys(), (n, sorted(got_p.keys() ^ want_p.keys()))
    # Per tensor, the relative difference in norm: AdamW divides each element's step by its
    # gradient's running scale, so an element whose gradient is ~0 moves by up to lr on the
    # last bits of summation order (dp=2 alone moves single elements by 3e-5 of the largest).
    worst, where = 0.0, ""
    for k in want_p:
        a, b = got_p[k], want_p[k]
        diff = (sum((x - y) ** 2 for x, y in zip(a, b)) / (sum(y * y for y in b) or 1.0)) ** 0.5
        if diff > worst: worst, where = diff, k
    print(f"{n}: 10 losses within {rel:.1e}, {len(got_p)} parameters within {worst:.1e} "
          f"(largest at {where}) of {ref}")
    if worst > 1e-5:
        sys.exit(f"context parallel: {n}'s parameter {where} differs from {ref}'s by {worst:.2e}")
PY
}
run one 1 llama_tiny
run cp2 2 llama_tiny --set 'parallel.mesh={"cp":2}'
grep -q "context cp=2 (ring, zigzag)" "$dir/cp2.log" || { grep -m3 "plan\|context" "$dir/cp2.log"; echo "context parallel: cp2 does not report its split" >&2; exit 1; }
run cp4_allgather 4 llama_tiny --set 'parallel.mesh={"cp":4}' \
  --set parallel.plan=\""$plans/llama_cp_allgather.json"\"
run cp2_tp2 4 llama_tiny --set 'parallel.mesh={"cp":2,"tp":2}' \
  --set parallel.plan=\""$plans/llama_dp_tp.json"\"
run cp2_tp2_sp 4 llama_tiny --set 'parallel.mesh={"cp":2,"tp":2}' \
  --set parallel.plan=\""$plans/llama_dp_tp_sp.json"\"
run pp2_cp2 4 llama_tiny --set 'parallel.mesh={"pp":2,"cp":2}' \
  --set parallel.plan=\""$plans/llama_pp_dp.json"\"
run dp2_cp2_zero1 4 llama_tiny --set 'parallel.mesh={"dp":2,"cp":2}' --set parallel.zero=1
run dp2_cp2_zero3 4 llama_tiny --set 'parallel.mesh={"dp":2,"cp":2}' --set parallel.zero=3
same one cp2 cp4_allgather cp2_tp2 cp2_tp2_sp pp2_cp2 dp2_cp2_zero1 dp2_cp2_zero3
# Experts, with their load-balancing loss: it is over the tokens forwarded together, so both
# runs forward the step's 4 sequences at once (one micro-batch of 4; 2 per ep rank).
run moe_one 1 mixtral_tiny --set train.micro_batch_size=4
run moe_cp2_ep2 4 mixtral_tiny --set 'parallel.mesh={"cp":2,"ep":2}' \
  --set parallel.plan=\""$plans/mixtral_ep_dp.json"\"
same moe_one moe_cp2_ep2

# A checkpoint saved at cp=2 (ZeRO-1: AdamW's moments sliced over dp x cp) loads at cp=1 and at
# tp=2 bitwise: one more step at lr 1e-30 without weight decay (it moves no fp32 weight) saves
# the weights as loaded, and their export equals the cp=2 checkpoint's byte for byte.
reload() {  # reload NAME RANKS [--set ...]
  local name=$1 ranks=$2
  shift 2
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(--nproc-per-node "$ranks")
  cp -r "$dir/dp2_cp2_zero1.ckpt" "$dir/$name.ckpt"
  timeout 300 "$train" --config "$root/configs/llama_tiny.json" "${launch[@]}" "${fixed[@]}" \
    --set train.steps=11 --set train.lr=1e-30 --set train.min_lr=0 --set train.weight_decay=0 \
    --set checkpoint.dir=\""$dir/$name.ckpt"\" "$@" > "$dir/$name.log" 2>&1 \
    || { tail -n 30 "$dir/$name.log"; echo "context parallel: reloading at $name failed" >&2; exit 1; }
  grep -q "resumed from .*step-00000010" "$dir/$name.log" || { echo "context parallel: $name did not resume" >&2; exit 1; }
  "$convert" --checkpoint "$dir/$name.ckpt" --to-hf "$dir/$name.hf" > "$dir/$name.convert" 2>&1 \
    || { cat "$dir/$name.convert"; exit 1; }
  cmp "$dir/dp2_cp2_zero1.hf/model.safetensors" "$dir/$name.hf/model.safetensors" \
    || { echo "context parallel: the cp=2 checkpoint loaded at $name differs" >&2; exit 1; }
  echo "$name: the cp=2 checkpoint's weights, bitwise"
}
reload at_cp1 1
reload at_tp2 2 --set 'parallel.mesh={"tp":2}' --set parallel.plan=\""$plans/llama_tp.json"\"

# Memory: at 2048 tokens, each rank's activations (the counting allocator's peak less a 16-token
# run's, which is the weights, gradients and optimizer) fall to at most about 1/cp of one
# device's, and halve again from cp=2 to cp=4. (Below 1/cp in fact: one device keeps each
# layer's attention probabilities, T^2 per head, which the ring's blocks recompute from the
# log-sum-exp.)
long=(--set train.global_batch_size=1 --set train.micro_batch_size=1 --set train.steps=2
      --set model.max_seq_len=2048 --set train.eval_every=0 --set train.sample_every=0)
peak() {  # peak NAME RANKS SEQ MESH
  local launch=()
  [ "$2" -gt 1 ] && launch=(--nproc-per-node "$2")
  timeout 300 "$train" --config "$root/configs/llama_tiny.json" "${launch[@]}" "${long[@]}" \
    --set train.seq_len="$3" --set "parallel.mesh=$4" --set log.metrics_jsonl=\""$dir/$1.jsonl"\" \
    > "$dir/$1.log" 2>&1 || { tail -n 20 "$dir/$1.log"; echo "context parallel: $1 failed" >&2; exit 1; }
}
peak base 1 16 '{"dp":1}'
peak long1 1 2048 '{"dp":1}'
peak long_cp2 2 2048 '{"cp":2}'
peak long_cp4 4 2048 '{"cp":4}'
"$python" - "$dir" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
peak = lambda n: max(json.loads(l)["tensor_peak_gb"] for l in open(f"{d}/{n}.jsonl") if "tensor_peak_gb" in l)
base = peak("base")
act = {cp: peak(n) - base for cp, n in ((1, "long1"), (2, "long_cp2"), (4, "long_cp4"))}
print("activations per rank at 2048 tokens: " + ", ".join(f"cp={cp} {a * 1024:.1f} MiB ({a / act[1]:.3f} of one device)" for cp, a in act.items()))
for cp in (2, 4):
    if act[cp] > 1.1 * act[1] / cp:
        sys.exit(f"context parallel: cp={cp} keeps {act[cp] / act[1]:.3f} of one device's activations, more than 1/{cp}")
if act[4] > 0.55 * act[2]:
    sys.exit(f"context parallel: cp=4 keeps {act[4] / act[2]:.3f} of cp=2's activations, not about half")
PY

# Errors, before any rank starts.
fails() {  # fails NAME CONFIG EXPECTED-TEXT ARGS...
  local name=$1 config=$2 want=$3
  shift 3
  if "$train" --config "$root/configs/$config.json" "${fixed[@]}" "$@" > "$dir/$name.err" 2>&1; then
    echo "context parallel: $name was accepted" >&2; exit 1
  fi
  grep -qF -- "$want" "$dir/$name.err" || { cat "$dir/$name.err"; echo "context parallel: $name: no '$want'" >&2; exit 1; }
}
fails indivisible llama_tiny "the sequence length (36) must divide into 8 chunks" \
  --nproc-per-node 4 --set 'parallel.mesh={"cp":4}' --set train.seq_len=36
fails gpt nanogpt_tiny "has no attention that context parallelism knows" \
  --nproc-per-node 2 --set 'parallel.mesh={"cp":2}'
fails order llama_tiny "put the context dim 'cp' right after 'dp'" \
  --nproc-per-node 4 --set 'parallel.mesh={"cp":2,"dp":2}'
fails missing llama_tiny "context.dim 'cp' is not a dim of parallel.mesh" \
  --nproc-per-node 2 --set 'parallel.mesh={"dp":2}' --set parallel.plan=\""$plans/llama_cp_allgather.json"\"
echo "context parallel: ok"
