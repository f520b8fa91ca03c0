#!/usr/bin/env bash
# A preempted Slurm job checkpoints, requeues itself, resumes from that checkpoint and finishes:
#
#   MPICKPT_SOURCE_DIR=... MPICKPT_BINARY_DIR=... MPICKPT_CLI=.../mpickpt \
#     test_slurm.sh OUTDIR mpirun|srun
#
# 1. starts a private single-node Slurm in OUTDIR/slurm (jobs/slurm/local-slurm.sh; always stopped
#    on exit, and by its watcher should this script be killed);
# 2. submits jobs/slurm/demo-mpirun.sbatch (or demo-srun.sbatch: srun --mpi=pmix) on 2 tasks, a
#    small model that holds at its first checkpoint (epoch 0, step 5) until it is preempted
#    (--hold: the signal cannot come too late, however slow the machine);
# 3. once it is RUNNING and has committed a checkpoint, preempts it: scancel --signal=USR1 --batch;
# 4. checks that it took its final checkpoint (`preempted epoch=E step=T`, the latest in `mpickpt
#    list`), requeued itself (PENDING, Restarts=1), then (StartTime=now, 2 s after the requeue,
#    skips the rest of the cred_expire wait) ran again with SLURM_RESTART_COUNT=1 (a resumed run
#    does not hold), resumed at exactly E/T = 0/5, verified every value, finished
#    (`done`), and the job COMPLETED with exit code 0. No accounting (sacct) is needed.
# Needs root and the packages of `jobs/deps.sh slurm`.
set -uo pipefail
out=${1:?usage: test_slurm.sh OUTDIR mpirun|srun}
launcher=${2:?usage: test_slurm.sh OUTDIR mpirun|srun}
: "${MPICKPT_SOURCE_DIR:?}" "${MPICKPT_BINARY_DIR:?}" "${MPICKPT_CLI:?}"
src=$MPICKPT_SOURCE_DIR
case "$launcher" in
  mpirun | srun) script=$src/jobs/slurm/demo-$launcher.sbatch ;;
  *) echo "test_slurm: launcher is mpirun or srun, got '$launcher'" >&2; exit 2 ;;
esac
local_slurm=$src/jobs/slurm/local-slurm.sh

failures=0
checks=0
check() { # condition-status message
  checks=$((checks + 1))
  if [ "$1" -ne 0 ]; then
    failures=$((failures + 1))
    echo "FAIL: $2" >&2
  fi
}
absent() { ! grep -q "$@"; } # grep-args: 0 when nothing matches
# wait_until TIMEOUT-S DESCRIPTION COMMAND...: polls COMMAND every 0.2 s
wait_until() {
  local timeout=$1 what=$2 end
  shift 2
  end=$((SECONDS + timeout))
  while [ $SECONDS -lt $end ]; do
    "$@" && return 0
    sleep 0.2
  done
  echo "FAIL: timed out after ${timeout}s waiting for: $what" >&2
  return 1
}

if [ "$(id -u)" -ne 0 ]; then
  echo "test_slurm: needs root (slurmd runs the jobs): skipped"
  exit 77
fi
for cmd in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
  command -v "$cmd" >/dev/null 2>&1 || {
    echo "test_slurm: $cmd is missing: install the Slurm packages (jobs/deps.sh slurm)" >&2
    exit 1
  }
done

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
sdir=$out/slurm
job=
cleanup() {
  local rc=$? pids p
  trap - EXIT INT TERM
  pids=$(cat "$sdir"/run/*.pid 2>/dev/null)
  "$local_slurm" stop "$sdir"
  for p in $pids; do
    if kill -0 "$p" 2>/dev/null; then
      echo "FAIL: process $p ($(cat /proc/"$p"/comm 2>/dev/null)) still runs after stop" >&2
      rc=1
    fi
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

MPICKPT_SLURM_OWNER_PID=$$ "$local_slurm" start "$sdir" || exit 1
eval "$("$local_slurm" env "$sdir")"
export SLURM_CONF

# The job's settings (sbatch passes this environment on).
export DEMO_DIR=$out/demo MPICKPT_BUILD_DIR=$MPICKPT_BINARY_DIR
export DEMO_ARGS="--epochs 3 --steps-per-epoch 10 --ckpt-every 5 --keep 3 --mb 1 --hold"
unset MPICKPT_DEADLINE SLURM_JOB_END_TIME
log=$out/job.out
job=$(cd "$out" && sbatch --parsable -n 2 -o "$log" "$script") || {
  echo "FAIL: sbatch $script" >&2
  exit 1
}
job=${job%%;*}
echo "test_slurm: submitted $script as job $job (output: $log)"

state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
field() { scontrol show job "$job" 2>/dev/null | grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }
is_running() { [ "$(state)" = RUNNING ]; }
has_ckpt() { grep -q '^checkpoint prefix=' "$log" 2>/dev/null; }
requeued() { [ "$(state)" = PENDING ] && [ "$(field Restarts)" = 1 ]; }
finished() { case "$(state)" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac; return 1; }
listing() { # epoch step of the latest checkpoint in the demo's chief/ (per mpickpt list --json)
  "$MPICKPT_CLI" list --json "$DEMO_DIR/chief" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
e = j["checkpoints"][-1] if j.get("checkpoints") else {}
print(e.get("epoch"), e.get("step"))'
}

ok=1
wait_until 60 "job $job RUNNING" is_running || ok=0
[ $ok = 1 ] && { wait_until 90 "a committed checkpoint in $log" has_ckpt || ok=0; }
if [ $ok = 1 ]; then
  echo "test_slurm: job $job is running and committed a checkpoint: scancel --signal=USR1 --batch $job"
  scancel --signal=USR1 --batch "$job"
  check $? "scancel --signal=USR1 --batch $job"
  wait_until 90 "job $job preempted and requeued (PENDING, Restarts=1)" requeued || ok=0
fi
pre=$(grep -E '^preempted epoch=[0-9]+ step=[0-9]+ reason=signal$' "$log" | head -1)
E=$(sed -E 's/^preempted epoch=([0-9]+) step=([0-9]+).*/\1/' <<<"$pre")
T=$(sed -E 's/^preempted epoch=([0-9]+) step=([0-9]+).*/\2/' <<<"$pre")
check "$([ -n "$pre" ]; echo $?)" "no 'preempted epoch=E step=T reason=signal' line in $log"
check "$([ "$E $T" = "0 5" ]; echo $?)" "preempted at epoch=$E step=$T, expected the held first checkpoint 0 5"
if [ $ok = 1 ]; then
  # Between the two runs: the checkpoint of the preempted step is the latest committed one.
  latest=$(listing)
  check "$([ "$latest" = "$E $T" ]; echo $?)" "mpickpt list: latest is '$latest', preempted at '$E $T'"
  # Slurm revokes the old run's credential when the job is requeued, with one-second resolution: a
  # run started within the same second is refused for good ("Job credential revoked", the job
  # FAILS). The requeue set BeginTime to cred_expire (10 s) later; skip most of that, not all.
  sleep 2
  echo "test_slurm: preempted at epoch=$E step=$T, requeued; releasing it (scontrol update StartTime=now)"
  scontrol update JobId="$job" StartTime=now
  wait_until 120 "job $job finished" finished || ok=0
fi
check "$([ $ok = 1 ]; echo $?)" "the job did not go through preempt -> requeue -> finish in time"

echo "== job $job: scontrol show job (after)"
scontrol show job "$job" | grep -E 'JobState|Restarts|ExitCode' | sed 's/^ */   /'
check "$([ "$(state)" = COMPLETED ]; echo $?)" "job state $(state), expected COMPLETED"
check "$([ "$(field Restarts)" = 1 ]; echo $?)" "Restarts=$(field Restarts), expected 1"
check "$([ "$(field ExitCode)" = 0:0 ]; echo $?)" "ExitCode=$(field ExitCode), expected 0:0"

# The two runs in the (appended) output file.
run0=$(sed -n '/start SLURM_RESTART_COUNT=0 /,/start SLURM_RESTART_COUNT=1 /p' "$log")
run1=$(sed -n '/start SLURM_RESTART_COUNT=1 /,$p' "$log")
check "$(grep -q 'start SLURM_RESTART_COUNT=0 ' <<<"$run0"; echo $?)" "first run: no SLURM_RESTART_COUNT=0"
check "$(grep -q '^fresh start$' <<<"$run0"; echo $?)" "first run: no 'fresh start'"
check "$(grep -qxF "$pre" <<<"$run0"; echo $?)" "first run: no 'preempted' line"
check "$(grep -qE "^checkpoint prefix=\S+ epoch=$E step=$T " <<<"$run0"; echo $?)" \
  "first run: no checkpoint at epoch=$E step=$T"
check "$(grep -q 'preempted (exit 75): scontrol requeue' <<<"$run0"; echo $?)" "first run: no requeue"
check "$(absent '^done ' <<<"$run0"; echo $?)" "first run printed done"
check "$(grep -q 'start SLURM_RESTART_COUNT=1 ' <<<"$run1"; echo $?)" "second run: no SLURM_RESTART_COUNT=1"
check "$(grep -qE "^resumed epoch=$E step=$T from=$DEMO_DIR/chief/ckpt-[0-9]+$" <<<"$run1"; echo $?)" \
  "second run: no 'resumed epoch=$E step=$T from=$DEMO_DIR/chief/...'"
check "$(grep -q "^verified every restored value at step $T:" <<<"$run1"; echo $?)" "second run: not verified"
check "$(grep -qx 'done epoch=2 step=30' <<<"$run1"; echo $?)" "second run: no 'done epoch=2 step=30'"
check "$(grep -q "$launcher exited with status 0" <<<"$run1"; echo $?)" "second run: $launcher did not exit 0"
check "$(absent 'verification failed' "$log"; echo $?)" "verification failed"
check "$(absent 'SLURM_RESTART_COUNT=2' "$log"; echo $?)" "the job ran a third time"
check "$(absent -E 'AddressSanitizer|LeakSanitizer|runtime error' "$log"; echo $?)" \
  "sanitizer report in $log"

echo "== job $job output ($log)"
sed 's/^/   /' "$log"
if [ $failures -ne 0 ]; then
  echo "== slurmctld log (tail)"
  tail -20 "$sdir/log/slurmctld.log" 2>/dev/null | sed 's/^/   /'
  echo "== slurmd log (tail)"
  tail -20 "$sdir/log/slurmd.log" 2>/dev/null | sed 's/^/   /'
fi
echo "test_slurm ($launcher): $((checks - failures))/$checks checks passed"
[ $failures -eq 0 ]
