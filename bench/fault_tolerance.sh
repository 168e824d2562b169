#!/usr/bin/env bash
# Recovery time after a kill (issue 36): vescale-train under --max-restarts 1 at dp=2, kill -9
# of rank 1 after step KILL_AT; from the kill to the first step after the resume, split into
# noticing it (kill -> the launcher's restart line: the peer's error, stopping the group),
# starting again (restart line -> "resumed from": processes, rendezvous, model, the checkpoint
# read) and the first step; resuming from disk (checkpoint.every=4) and from the launchers'
# memory (checkpoint.in_memory_every=4, nothing on disk). Against that: the steps lost, one
# step's time, and what a save stalls the step (disk: staging the async write; memory: the copy
# sent to the launchers). Medians of RUNS runs. Results in bench/results/fault_tolerance.md.
# Knobs: RUNS=3, KILL_AT=8.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
RUNS=${RUNS:-3} KILL_AT=${KILL_AT:-8}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 - "$BUILD_DIR/apps/vescale-train" "$out" "$RUNS" "$KILL_AT" <<'PY'
import datetime, os, re, signal, statistics, subprocess, sys, time
train, out, runs, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
models = {  # name: --set overrides (llama_tiny's shape, then a wider one: a larger checkpoint)
    "llama_tiny (0.85M params)": [],
    "llama d512 x8 (25M params)": ["model.dim=512", "model.n_layers=8", "model.n_heads=8",
                                    "model.n_kv_heads=8", "model.ffn_dim=1536"],
}
def run_once(sets, tag, memory):
    ck = os.path.join(out, tag)
    saves = ["checkpoint.every=1000", "checkpoint.in_memory_every=4"] if memory else ["checkpoint.every=4"]
    cmd = [train, "--config", "configs/llama_tiny.json", "--nproc-per-node", "2", "--max-restarts", "1",
           "--set", "train.seq_len=64", "--set", "train.batch_size=2", "--set", "train.steps=%d" % (kill_at + 6),
           "--set", "train.log_every=1", "--set", 'checkpoint.dir="%s"' % ck]
    for s in saves: cmd += ["--set", s]
    for s in sets: cmd += ["--set", s]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    stamps, t_kill, step_ms, stall = {}, None, [], []
    for line in p.stdout:
        now = time.monotonic()
        st = re.search(r"(?:staged in|in the launchers' memory: .* MB on rank 0,) ([0-9.]+) ms", line)
        if st and t_kill is None: stall.append(float(st.group(1)))
        m = re.search(r"info step +(\d+)/\d+ .*\| ([0-9.]+) ms/step", line)
        if m and t_kill is None:
            step_ms.append(float(m.group(2)))
            if int(m.group(1)) == kill_at:
                kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
                for k in kids:
                    if open(f"/proc/{k}/cmdline").read().startswith("vescale-train[rank 1]"):
                        t_kill = time.monotonic(); os.kill(int(k), signal.SIGKILL)
        elif t_kill is not None:
            if "vescale-run: restart 1/1" in line and "restart" not in stamps:
                stamps["restart"] = now
                r = re.search(r"resuming from step (\d+)", line); stamps["from"] = int(r.group(1))
            if "info resumed from" in line: stamps["resumed"] = now
            if m and "first" not in stamps: stamps["first"] = now
    code = p.wait()
    assert code == 0 and t_kill is not None and "first" in stamps, f"the run did not recover: exit {code}, killed {t_kill is not None}, {stamps}"
    return {"notice": stamps["restart"] - t_kill, "start": stamps["resumed"] - stamps["restart"],
            "first": stamps["first"] - stamps["resumed"], "total": stamps["first"] - t_kill,
            "lost": kill_at - stamps["from"], "step_ms": statistics.median(step_ms[2:]),
            "stall": statistics.median(stall) if stall else 0.0}
rows = []
for name, sets in models.items():
    for memory in (False, True):
        rs = [run_once(sets, f"{i}{len(rows)}", memory) for i in range(runs)]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        rows.append(f"| {name} | {'memory' if memory else 'disk'} | {med['notice']:.2f} | {med['start']:.2f} | "
                    f"{med['first']:.2f} | **{med['total']:.2f}** | {med['lost']:.0f} | {med['step_ms']:.0f} | "
                    f"{med['stall']:.0f} ({100 * med['stall'] / med['step_ms']:.0f}%) |")
text = "\n".join([
    "# Recovery after a kill", "",
    f"{datetime.date.today()}; `bench/fault_tolerance.sh`; vescale-train at dp=2 (2 ranks, this 2-core machine) under "
    f"`--max-restarts 1`, a checkpoint every 4 steps, `kill -9` of rank 1 after step {kill_at}; seconds, medians of {runs} runs.", "",
    "| model | resumed from | kill -> restart line | restart -> resumed (start, rendezvous, model, read) | resumed -> first step | kill -> first step | steps lost | ms/step | save stall ms (of a step) |",
    "|---|---|---|---|---|---|---|---|---|", *rows, ""])
open("bench/results/fault_tolerance.md", "w").write(text)
print(text)
PY
