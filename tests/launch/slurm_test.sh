#!/usr/bin/env bash
# vescale-train launched by a real single-node Slurm (Debian's slurm-wlm): the test starts its own
# slurmctld and slurmd from a private folder (config, state, logs; nothing under /etc), runs
# `srun -N1 -n2 vescale-train ...` and docs/dist.md's sbatch script (MASTER_ADDR from scontrol show
# hostnames) at one node, and stops them. The losses must equal the same config launched by
# vescale-train --nproc-per-node 2. Exit 77 (skipped) only where the daemons cannot start.
# Usage: slurm_test.sh vescale-train
set -uo pipefail
train=$1
SKIP=77
PATH=$PATH:/usr/sbin:/sbin
for exe in slurmctld slurmd srun sinfo scontrol squeue scancel; do
  command -v "$exe" > /dev/null || { echo "SKIPPED: $exe not found (scripts/setup installs slurm-wlm)"; exit $SKIP; }
done
# A caller inside a Slurm job would leak its job's variables into our srun.
for v in $(compgen -e | grep -E '^(SLURM|SLURMD|SBATCH|SALLOC|SRUN)_' || true); do unset "$v"; done

top=$(mktemp -d /tmp/vescale-slurm.XXXXXX)  # short: socket paths are limited to 108 bytes
chmod 755 "$top"
mkdir -p "$top"/{state,spool,log,munge}
export SLURM_CONF=$top/slurm.conf
ctld= slurmd_pid= munged=
stop_all() {
  local rc=$? p
  trap - EXIT
  if [ -n "$ctld" ] && kill -0 "$ctld" 2> /dev/null; then
    squeue -h -o %A 2> /dev/null | xargs -r scancel 2> /dev/null
    scontrol shutdown > /dev/null 2>&1
  fi
  for p in $slurmd_pid $ctld $munged; do kill -TERM "$p" 2> /dev/null; done
  sleep 0.5
  # slurmstepd and the tasks are not our children: find them by this cluster's SLURM_CONF.
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    { tr "\\0" "\\n" < "/proc/$p/environ"; } 2> /dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && kill -KILL "$p" 2> /dev/null
  done
  for p in $slurmd_pid $ctld $munged; do kill -KILL "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  [ $rc -eq 0 ] || [ $rc -eq $SKIP ] || { echo "--- slurm logs"; tail -n 20 "$top"/log/*; }
  rm -rf "$top"
  exit $rc
}
trap stop_all EXIT
skip() { echo "SKIPPED: $*"; tail -n 5 "$top"/log/* 2> /dev/null; exit $SKIP; }

# Authentication: auth/none needs no daemon (Slurm 22.05 ships it); else a private munged.
if compgen -G '/usr/lib/*/slurm-wlm/auth_none.so' > /dev/null || compgen -G '/usr/lib*/slurm/auth_none.so' > /dev/null; then
  auth=$'AuthType=auth/none\nCredType=cred/none'
else
  command -v munged > /dev/null || skip "neither auth/none nor munged is available"
  mungekey -c -k "$top/munge/key" > /dev/null 2>&1 || skip "mungekey failed"
  munged -F --force --socket="$top/munge/sock" --key-file="$top/munge/key" --pid-file="$top/munge/pid" \
    --log-file="$top/log/munged.log" --seed-file="$top/munge/seed" > /dev/null 2>&1 &
  munged=$!
  sleep 0.5
  auth=$'AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket='"$top/munge/sock"
fi
port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
cat > "$SLURM_CONF" <<CONF
ClusterName=vescaletest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
$auth
StateSaveLocation=$top/state
SlurmdSpoolDir=$top/spool
SlurmctldPidFile=$top/slurmctld.pid
SlurmdPidFile=$top/slurmd.pid
SlurmctldLogFile=$top/log/slurmctld.log
SlurmdLogFile=$top/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
KillOnBadExit=1
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
# -D: in the foreground, our children (a daemonized slurmctld returns 0 even when it dies).
slurmctld -D -f "$SLURM_CONF" > "$top/log/slurmctld.out" 2>&1 &
ctld=$!
slurmd -D -f "$SLURM_CONF" -N localhost > "$top/log/slurmd.out" 2>&1 &
slurmd_pid=$!
for _ in $(seq 150); do
  kill -0 "$ctld" 2> /dev/null || skip "slurmctld exited at start"
  kill -0 "$slurmd_pid" 2> /dev/null || skip "slurmd exited at start"
  state=$(sinfo -h -n localhost -o %T 2> /dev/null)
  [ "$state" = idle ] && break
  case $state in inval* | drain*) skip "the node is '$state'" ;; esac
  sleep 0.2
done
[ "$state" = idle ] || skip "the node did not become idle (state '$state')"
echo "slurm: $(slurmctld -V) up on ports $port/$((port + 1))"

dir=$top/run
mkdir -p "$dir"
source "$(dirname "$0")/launch_common.sh"
# A rank that fails before the rendezvous leaves the others waiting for its store: bound the wait.
export VESCALE_COLLECTIVE_TIMEOUT_S=60
# phase SECONDS NAME LOG COMMAND...: runs COMMAND, and on failure or at the deadline prints its
# output, the queue, the slurm logs and the leftover tasks, naming the phase.
phase() {
  local secs=$1 name=$2 log=$3 rc
  shift 3
  timeout -k 5 "$secs" "$@" > "$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && return 0
  echo "--- $name failed (exit $rc$([ $rc -eq 124 ] && echo ", not done after ${secs} s")):"
  tail -n 40 "$log"
  [ -f "$dir/sbatch.log" ] && { echo "--- the batch job's output"; tail -n 40 "$dir/sbatch.log"; }
  echo "--- queue"; squeue 2>&1 | head
  echo "--- tasks still running"; ps -eo pid,stat,etime,args | grep -E "vescale-train|slurmstepd" | grep -v grep
  exit 1
}
# Slurm itself first: a machine whose slurmd cannot start a step is not a vescale failure.
if ! timeout -k 5 30 srun -N1 -n2 true > "$dir/probe.log" 2>&1; then
  cat "$dir/probe.log"
  skip "this machine's Slurm cannot run a trivial step (srun -N1 -n2 true)"
fi
phase 90 "the reference run (vescale-train --nproc-per-node 2)" "$dir/reference.log" \
  "$train" "${TRAIN_ARGS[@]}" --nproc-per-node 2 --set log.metrics_jsonl=\"$dir/reference.jsonl\"
phase 90 "srun -N1 -n2 vescale-train" "$dir/srun.log" \
  srun -N1 -n2 --kill-on-bad-exit=1 "$train" "${TRAIN_ARGS[@]}" --set log.metrics_jsonl=\"$dir/srun.jsonl\"
grep -q "launched by slurm" "$dir/srun.log" || { cat "$dir/srun.log"; echo "no slurm launch line" >&2; exit 1; }
same_losses "$dir/reference.jsonl" "$dir/srun.jsonl" || exit 1

# docs/dist.md's sbatch script, at one node of 2 tasks: MASTER_ADDR from scontrol show hostnames.
{
  echo '#!/bin/bash'
  echo '#SBATCH --nodes=1'
  echo '#SBATCH --ntasks-per-node=2'
  echo '#SBATCH --cpus-per-task=1'
  echo 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
  echo "export MASTER_PORT=$(free_port)"
  echo 'export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK'
  printf 'srun --kill-on-bad-exit=1'
  printf ' %q' "$(realpath "$train")" "${TRAIN_ARGS[@]}" --set "log.metrics_jsonl=\"$dir/sbatch.jsonl\""
  echo
} > "$dir/job.sh"
phase 90 "sbatch --wait of docs/dist.md's script" "$dir/sbatch.submit.log" \
  sbatch --wait -o "$dir/sbatch.log" "$dir/job.sh"
same_losses "$dir/reference.jsonl" "$dir/sbatch.jsonl" || { cat "$dir/job.sh" "$dir/sbatch.log"; exit 1; }
echo "slurm: ok"
