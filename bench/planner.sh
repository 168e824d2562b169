#!/usr/bin/env bash
# The planner against published results, on paper (issue 34's second validation): with the
# shipped H100 profile and no per-row tuning, vescale-plan predicts the MFU of Megatron-LM's
# published GPT runs (README table: H100, bf16, sequence 4096, vocabulary 131072, dp=48 in every
# row, MFU at 989 TFLOP/s) at their layouts, and says which layout it prefers for the same model,
# GPUs and global batch, with the predicted gain. Writes bench/results/planner.md. Both with the
# `megatron` training stack (planner/training_stack.h): Megatron's fused kernels, bf16 gradients
# and weights on the wire, and the overlaps its README names for these runs.
# Model shapes: Megatron's table gives sizes, not shapes; each row takes the closest standard
# shape with 128-wide heads (listed in the results), as our GPT family (LayerNorm, GELU MLP 4h,
# learned positions, tied embedding).
# The measured half of the validation (runs on this machine against predictions) is not here yet.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
plan=$BUILD_DIR/apps/vescale-plan
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# size | layers | width | TP | PP | GPUs | global batch | published MFU (%)
ROWS=(
  "1.7B|24|2048|1|1|48|192|41"
  "7.1B|32|4096|2|1|96|192|47"
  "16B|40|5760|4|1|192|192|49"
  "32B|60|6656|8|1|384|192|46"
  "70B|80|8192|8|2|768|384|42"
  "119B|96|10240|8|4|1536|768|43"
  "177B|96|12288|8|6|2304|1152|44"
  "314B|128|14336|8|8|3072|1536|48"
  "462B|128|17408|8|16|6144|3072|47"
)
for row in "${ROWS[@]}"; do
  IFS='|' read -r size layers width tp pp gpus gb mfu <<< "$row"
  sp=""; [ "$tp" -gt 1 ] && sp=" sp"
  layout="pp=$pp dp=48 tp=$tp$sp zero1 mb1 1f1b"
  echo "planner: $size ($layout on $gpus)" >&2
  "$plan" --config gpt2_124m --set model.n_layer="$layers" --set model.n_embd="$width" \
    --set model.n_head=$((width / 128)) --set model.vocab_size=131072 --set model.n_positions=4096 \
    --set train.seq_len=4096 --set 'train.dtype="bf16"' --device h100 --gpus "$gpus" \
    --global-batch-size "$gb" --layout "$layout" --top 1 --stack megatron > "$out/$size.txt"
  echo "$row" > "$out/$size.row"
done
# The search's own speed: llama3_70b over 1024 GPUs (the issue's bar: under 10 s).
"$plan" --config llama3_70b --gpus 1024 --global-batch-size 2048 --top 1 | sed -n 2p > "$out/speed.txt"
python3 - "$out" "${ROWS[@]}" <<'PY'
import datetime, os, re, sys
d, rows = sys.argv[1], sys.argv[2:]
speed = open(os.path.join(d, "speed.txt")).read().strip()
lines = ["# vescale-plan against Megatron-LM's published MFU (on paper)", "",
         f"{datetime.date.today()}; `bench/planner.sh`; the shipped `h100` profile (configs/devices/h100.json, its "
         "GEMM efficiency and latencies assumed, not calibrated), no per-row tuning, the `megatron` training "
         "stack (`--stack megatron`: Transformer Engine's fused norm, bias-GELU and bias-dropout-add, bf16 "
         "gradient reduce-scatter and weight all-gather, `--overlap-grad-reduce --overlap-param-gather "
         "--tp-comm-overlap` as its README says of these runs; planner/training_stack.cpp). The published layouts "
         "as `pp=PP dp=48 tp=TP sp zero1 mb1 1f1b` (Megatron's distributed optimizer is ZeRO-1; its "
         "interleaving and selective recompute are not modelled). The planner's choice is searched with the same stack. MFU = 6N + attention FLOPs per token "
         "(train::flops_per_token) x tokens / (step x 989.4 TFLOP/s x GPUs).", "",
         "| model | shape (layers x width) | TP/PP | GPUs | global batch | published MFU | predicted MFU | relative error | planner's choice | its predicted MFU | predicted gain |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
within = 0
for row in rows:
    size, layers, width, tp, pp, gpus, gb, mfu = row.split("|")
    text = open(os.path.join(d, size + ".txt")).read()
    table = [l for l in text.splitlines() if re.match(r"^(=|1) ", l)]
    def parse(l):  # "#  <layout words>  step  tok/s/dev  MFU%  ..."
        t = l.split()
        k = next(i for i in range(1, len(t)) if re.fullmatch(r"[0-9.]+", t[i]))
        return " ".join(t[1:k]), float(t[k]), float(t[k + 2].rstrip("%"))
    pub_layout, pub_ms, pub_mfu = parse(table[0])
    best_layout, best_ms, best_mfu = parse(table[1]) if len(table) > 1 else ("none fits", 0, 0)
    err = (pub_mfu - float(mfu)) / float(mfu)
    within += abs(err) <= 0.15
    gain = pub_ms / best_ms if best_ms else 0
    lines.append(f"| {size} | {layers} x {width} | {tp}/{pp} | {gpus} | {gb} | {mfu}% | {pub_mfu:.1f}% | "
                 f"{100 * err:+.0f}% | {best_layout} | {best_mfu:.1f}% | {gain:.2f}x |")
lines += ["", f"Within 15% relative on {within} of {len(rows)} rows (the issue's bar: 7 of 9).", "",
          f"Search speed, llama3_70b on 1024 H100s, global batch 2048: `{speed}` (load average "
          f"{os.getloadavg()[0]:.1f}; the bar: under 10 s).", ""]
open("bench/results/planner.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
