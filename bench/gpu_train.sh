#!/usr/bin/env bash
# bf16 training of the ~1B LLaMA (configs/llama3_1b.json) on one GPU: vescale-train with and
# without activation checkpointing, then the same step in PyTorch Python eager
# (bench/gpu_train.py: transformers' LlamaForCausalLM, same shape, batch, seq, steps). Medians
# over the steps after WARMUP; MFU against the trainer's train.peak_flops "auto" (989 TFLOP/s
# dense bf16 on an H100/H200). Writes OUT_DIR/gpu_train.json (+ the raw logs beside it).
#   bench/gpu_train.sh [--dry-run] [OUT_DIR]     (OUT_DIR default: $OUT, else /tmp/gpu_train)
# --dry-run (no GPU): checks the config and binaries, prints vescale-train --dry-run's memory
# per case and the commands it would run, and steps the Python reference once on the CPU at a
# tiny size. Environment: STEPS (15), WARMUP (3), CONFIG, AC_CASES ("off on"), RUN_TIMEOUT (s
# per run, 150), PYTHON (the interpreter with torch + transformers; default: the venv's).
set -euo pipefail
source "$(dirname "$0")/bench_env.sh"
DRY=0
[ "${1:-}" = "--dry-run" ] && { DRY=1; shift; }
OUT_DIR=${1:-${OUT:-/tmp/gpu_train}}
STEPS=${STEPS:-15} WARMUP=${WARMUP:-3} CONFIG=${CONFIG:-configs/llama3_1b.json}
AC_CASES=${AC_CASES:-off on} RUN_TIMEOUT=${RUN_TIMEOUT:-150}
PYTHON=${PYTHON:-$VENV/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3  # the GPU image's own python3 holds torch and transformers
TRAIN=$BUILD_DIR/apps/vescale-train
mkdir -p "$OUT_DIR"
say() { printf '[gpu_train] %s\n' "$*"; }
[ -x "$TRAIN" ] || { echo "gpu_train: $TRAIN is not built (cmake --build $BUILD_DIR --target vescale-train builtin_data)" >&2; exit 1; }
[ -f "$BUILD_DIR/data/corpus_train.bin" ] || { echo "gpu_train: the built-in corpus is not built (--target builtin_data)" >&2; exit 1; }
"$PYTHON" -c 'import torch, transformers' || { echo "gpu_train: $PYTHON lacks torch or transformers" >&2; exit 1; }

# The config saves no checkpoints (a 1.24B save is ~15 GB); metrics JSONL has every step.
common=(--config "$CONFIG" --set "train.steps=$STEPS" --set train.log_every=5)
# --dry-run's CPU size (the same family as bench/gpu_train.py --dry-run).
TINY="model.vocab_size=512 model.dim=64 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.ffn_dim=128
      model.max_seq_len=64 train.batch_size=2 train.seq_len=32 train.steps=2 train.warmup_steps=1"
((DRY)) && WARMUP=0
rc=0
for ac in $AC_CASES; do
  flag=false; [ "$ac" = on ] && flag=true
  cmd=("$TRAIN" "${common[@]}" --set "train.activation_checkpointing=$flag"
       --set "log.metrics_jsonl=$OUT_DIR/vescale_ac_$ac.jsonl")
  py=("$PYTHON" bench/gpu_train.py "$CONFIG" --steps "$STEPS" --warmup "$WARMUP"
      --json "$OUT_DIR/pytorch_ac_$ac.json")
  [ "$ac" = on ] && py+=(--ac)
  if ((DRY)); then
    # The real commands, vescale-train's memory estimate for them, then both sides for real at
    # a tiny size on the CPU (2 steps), so that the summary below runs on their outputs too.
    say "AC $ac: would run: timeout $RUN_TIMEOUT ${cmd[*]}"
    "$TRAIN" --dry-run "${common[@]}" --set "train.activation_checkpointing=$flag" | sed 's/^/    /'
    say "AC $ac: would run: timeout $RUN_TIMEOUT ${py[*]}"
    tiny=()
    for s in $TINY; do tiny+=(--set "$s"); done
    timeout "$RUN_TIMEOUT" "${cmd[@]}" "${tiny[@]}" > "$OUT_DIR/vescale_ac_$ac.log" 2>&1 \
      || { tail -20 "$OUT_DIR/vescale_ac_$ac.log" >&2; echo "gpu_train: the tiny vescale-train run failed" >&2; exit 1; }
    PYTHONUNBUFFERED=1 timeout "$RUN_TIMEOUT" "${py[@]}" --dry-run > "$OUT_DIR/pytorch_ac_$ac.log" 2>&1 \
      || { tail -20 "$OUT_DIR/pytorch_ac_$ac.log" >&2; echo "gpu_train: gpu_train.py --dry-run failed" >&2; exit 1; }
    say "AC $ac: tiny CPU runs passed ($(grep -c step_ms "$OUT_DIR/vescale_ac_$ac.jsonl") vescale steps, PyTorch $(tail -1 "$OUT_DIR/pytorch_ac_$ac.log" | cut -c1-60)...)"
    continue
  fi
  rm -f "$OUT_DIR/vescale_ac_$ac.jsonl"
  say "AC $ac: vescale-train, $STEPS steps"
  timeout "$RUN_TIMEOUT" "${cmd[@]}" > "$OUT_DIR/vescale_ac_$ac.log" 2>&1 \
    || { rc=1; say "AC $ac: vescale-train failed or timed out (exit $?); tail of its log:"; tail -5 "$OUT_DIR/vescale_ac_$ac.log"; }
  say "AC $ac: PyTorch eager, $STEPS steps"
  PYTHONUNBUFFERED=1 timeout "$RUN_TIMEOUT" "${py[@]}" > "$OUT_DIR/pytorch_ac_$ac.log" 2>&1 \
    || { rc=1; say "AC $ac: gpu_train.py failed or timed out; tail of its log:"; tail -5 "$OUT_DIR/pytorch_ac_$ac.log"; }
done

# One summary of whatever finished: medians after WARMUP, ratio ours / PyTorch.
"$PYTHON" - "$OUT_DIR" "$WARMUP" "$DRY" $AC_CASES <<'PY'
import json, os, statistics, sys
d, warm, dry, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
out = {"bench": "gpu_train", "dry_run": dry, "warmup": warm, "cases": {}}
for ac in cases:
    c = {}
    p = os.path.join(d, f"vescale_ac_{ac}.jsonl")
    if os.path.exists(p):
        rows = [json.loads(l) for l in open(p) if l.strip()]
        rows = [r for r in rows if "step_ms" in r]
        kept = rows[warm:] or rows
        if kept:
            c["vescale"] = {k: statistics.median(r[k] for r in kept) for k in ("step_ms", "tokens_per_s", "mfu") if k in kept[0]}
            c["vescale"]["steps_measured"] = len(kept)
            c["vescale"]["memory_gb"] = max((r.get("memory_gb") or 0) for r in rows)
    p = os.path.join(d, f"pytorch_ac_{ac}.json")
    if os.path.exists(p):
        j = json.load(open(p))
        c["pytorch"] = {k: j[k] for k in ("step_ms_median", "tokens_per_s", "mfu_vs_989", "peak_memory_gb", "device", "torch", "transformers")}
    if "vescale" in c and "pytorch" in c:
        c["step_time_ratio_ours_over_pytorch"] = c["vescale"]["step_ms"] / c["pytorch"]["step_ms_median"]
    out["cases"][ac] = c
json.dump(out, open(os.path.join(d, "gpu_train.json"), "w"), indent=1)
print(json.dumps(out, indent=1))
if dry:
    print("[gpu_train] dry run: tiny CPU runs only, nothing measured")
PY
exit $rc
