# Writes OUT/gpu.md (bench/results/gpu.md's layout) and OUT/results.json from what
# scripts/device-check left in its work folder: gpu_train.json (bench/gpu_train.sh),
# rng_cuda.json (bench/rng --cuda), OUT/ctest-cuda.log, OUT/timeline.json, gpu.log.
#   python bench/gpu_report.py --work DIR --out OUT [--dry-run]
# A value that was not measured shows as "not measured"; a dry run says so at the top.
import argparse
import datetime
import json
import os
import re
import subprocess

TITAN = "TorchTitan Llama 3 8B bf16, 8 x H100: 33-39% MFU, 5.7-6.7k tokens/s/GPU"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v, spec, unit=""):
    return "not measured" if v is None else f"{v:{spec}}{unit}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    train = load(os.path.join(a.work, "gpu_train.json")) or {}
    rng = load(os.path.join(a.work, "rng_cuda.json")) or {}
    gpu = open(os.path.join(a.work, "gpu.log")).read().splitlines() if os.path.exists(os.path.join(a.work, "gpu.log")) else []
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    json.dump({"gpu_train": train, "rng_cuda": rng, "gpu": gpu, "commit": commit, "dry_run": a.dry_run},
              open(os.path.join(a.out, "results.json"), "w"), indent=1)

    dry = {"gpu_train": train, "rng_cuda": rng}
    if a.dry_run:  # the tiny CPU runs only checked the code: keep them out of the tables
        train, rng = {}, {}
    L = ["# GPU results: one H200", ""]
    if a.dry_run:
        L += ["**No GPU has been lent yet: nothing in this file is measured.** It is the layout that",
              "`scripts/device-check` fills on a GPU machine; the numbers below the tables come from its",
              f"`--dry-run` on the CPU dev machine ({datetime.date.today()}, commit {commit}), which only checks that every",
              "step runs. Fill it on an H200: `scripts/device-check \"$OUT\"` (see docs/gpu.md, \"Device check\"),",
              "then copy the `gpu.md` it writes over this file.", ""]
    else:
        L += [f"Measured {datetime.date.today()} by `scripts/device-check` at commit {commit} on: {gpu[0] if gpu else '?'}.", ""]

    L += ["## Results", "",
          "### ~1B LLaMA, bf16, one GPU (configs/llama3_1b.json: 1.24B, batch 8 x 2048)", "",
          "MFU against the dense bf16 peak (989 TFLOP/s on H100/H200, `train.peak_flops: auto`); FLOPs per token",
          "as the trainer counts them (6 x matmul parameters + 12 L d T). Medians over the steps after warm-up.", "",
          "| activation checkpointing | vescale tokens/s | vescale MFU | PyTorch eager tokens/s | step ms ours / PyTorch | ours / PyTorch | peak GB ours / PyTorch |",
          "|---|---|---|---|---|---|---|"]
    for ac in ("off", "on"):
        c = train.get("cases", {}).get(ac, {})
        v, p = c.get("vescale", {}), c.get("pytorch", {})
        ratio = c.get("step_time_ratio_ours_over_pytorch")
        L.append(f"| {ac} | {fmt(v.get('tokens_per_s'), ',.0f')} | {fmt(v.get('mfu') and 100 * v['mfu'], '.1f', '%')} | "
                 f"{fmt(p.get('tokens_per_s'), ',.0f')} | {fmt(v.get('step_ms'), '.0f')} / {fmt(p.get('step_ms_median'), '.0f')} | "
                 f"{fmt(ratio, '.2f', 'x')} | {fmt(v.get('memory_gb'), '.1f')} / {fmt(p.get('peak_memory_gb'), '.1f')} |")
    L += ["", f"Reference: {TITAN} (a model 6.5x larger on 8 GPUs with FSDP; the closest published bf16",
          "figure, not the same workload: read it as the bar for MFU, not a like-for-like ratio).", "",
          "### Philox RNG on CUDA (bench/rng --cuda)", "",
          f"One fp32 tensor of {rng.get('numel', 2**28):,} elements ({rng.get('bytes', 4 * 2**28) / 2**30:.2f} GiB), "
          "median of the synchronized fills; GB/s written against the H200's 4.8 TB/s.", "",
          "| fill | ms | GB/s written | of 4.8 TB/s |", "|---|---|---|---|"]
    fills = {f["fill"]: f for f in rng.get("fills", [])}
    for name, label in (("uniform", "vescale uniform_"), ("normal", "vescale normal_ (Box-Muller in double)"),
                        ("bernoulli", "vescale bernoulli_(0.9)"), ("torch_uniform", "libtorch uniform_, for scale")):
        f = fills.get(name, {})
        L.append(f"| {label} | {fmt(f.get('ms'), '.3f')} | {fmt(f.get('gb_per_s'), ',.0f')} | "
                 f"{fmt(f.get('of_4800') and 100 * f['of_4800'], '.1f', '%')} |")

    ctest = os.path.join(a.out, "ctest-cuda.log")
    text = open(ctest).read() if os.path.exists(ctest) else ""
    m = re.search(r"^.*tests passed.*$", text, re.M)
    skipped = len(re.findall(r"SKIPPED|Skipped|Not Run", text))
    L += ["", "### CUDA tests and the timeline", "",
          f"- `ctest -L cuda`: {m.group(0).strip() if m else ('no tests labelled cuda' if 'No tests were found' in text else 'not run')}"
          + (f" ({skipped} lines say skipped)" if skipped else "") + ".",
          ]
    tl = load(os.path.join(a.out, "timeline.json"))
    if tl is not None:
        ev = tl.get("traceEvents", tl if isinstance(tl, list) else [])
        cats = sorted({str(e.get("cat")) for e in ev if isinstance(e, dict) and e.get("cat")})
        L.append(f"- `vescale-train llama_tiny --timeline`: {len(ev)} trace events; categories {', '.join(cats) or '-'}.")
    else:
        L.append("- `vescale-train llama_tiny --timeline`: not run.")
    if a.dry_run:
        log = os.path.join(a.out, "device-check.log")
        steps = [l.split("] ", 1)[1] for l in open(log) if re.search(r"\] \w+: (ok|FAILED|TIMED|SKIPPED)", l)] if os.path.exists(log) else []
        L += ["", "## Dry run (CPU dev machine, nothing measured)", "",
              "`scripts/device-check --dry-run /tmp/dc`: every step but the GPU's own work, each step's wall time:", ""]
        L += [f"- {s.strip()}" for s in steps]
        cases = dry["gpu_train"].get("cases", {})
        for ac, c in cases.items():
            v, p = c.get("vescale", {}), c.get("pytorch", {})
            L.append(f"- tiny CPU check of the training benchmark, AC {ac}: vescale-train {v.get('steps_measured', 0)} steps "
                     f"({fmt(v.get('step_ms'), '.0f')} ms/step), gpu_train.py one step ({fmt(p.get('step_ms_median'), '.0f')} ms, "
                     f"torch {p.get('torch', '?')}, transformers {p.get('transformers', '?')})")
        if dry["rng_cuda"]:
            L.append(f"- bench/rng --cuda --dry-run: {len(dry['rng_cuda'].get('fills', []))} fills of {dry['rng_cuda'].get('numel')} floats on the CPU, JSON written")
    L += ["", "Reproduce: `scripts/device-check OUT_DIR` on the GPU machine (6-minute budget); the parts alone:",
          "`bench/gpu_train.sh OUT_DIR`, `build/bench/rng --cuda --json OUT_DIR/rng_cuda.json`, `ctest -L cuda`."]
    open(os.path.join(a.out, "gpu.md"), "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
