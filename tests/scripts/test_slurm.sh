#!/usr/bin/env bash
# A preempted Slurm job checkpoints, requeues itself, resumes from that checkpoint and finishes,
# through jobs/slurm/mpickpt-run.sbatch and mpickpt-run:
#
#   MPICKPT_SOURCE_DIR=... MPICKPT_BINARY_DIR=... MPICKPT_CLI=.../mpickpt \
#     test_slurm.sh OUTDIR mpirun|srun
#
# 1. starts a private single-node Slurm in OUTDIR/slurm (jobs/slurm/local-slurm.sh; always stopped
#    on exit, and by its watcher should this script be killed);
# 2. submits jobs/slurm/mpickpt-run.sbatch --launcher mpirun|srun --dir DIR -- mpickpt-demo ... on
#    2 tasks (root and oversubscription allowed by this test's environment, which sbatch passes
#    on), a small model that holds at its first checkpoint (epoch 0, step 5) until it is
#    preempted (--hold: the signal cannot come too late, however slow the machine);
# 3. once it is RUNNING and has committed a checkpoint, preempts it: scancel --signal=USR1 --batch
#    (to mpickpt-run, the batch shell's process, which forwards it to mpirun or srun);
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
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=$src/jobs/slurm/mpickpt-run.sbatch
case "$launcher" in
  mpirun | srun) ;;
  *) echo "test_slurm: launcher is mpirun or srun, got '$launcher'" >&2; exit 2 ;;
esac
# shellcheck source=tests/scripts/slurm_lib.sh
. "$here/slurm_lib.sh"
slurm_test_start test_slurm "$out"

# The job (sbatch passes this environment on).
DEMO_DIR=$out/demo
export MPICKPT_RUN=$MPICKPT_BINARY_DIR/bin/mpickpt-run
demo=(--launcher "$launcher" --dir "$DEMO_DIR" -- "$MPICKPT_BINARY_DIR/bin/mpickpt-demo"
      --dir "$DEMO_DIR" --epochs 3 --steps-per-epoch 10 --ckpt-every 5 --keep 3 --mb 1 --hold)
unset MPICKPT_DEADLINE SLURM_JOB_END_TIME MPICKPT_RUNS
log=$out/job.out
job=$(cd "$out" && sbatch --parsable -n 2 -o "$log" "$script" "${demo[@]}") || {
  echo "FAIL: sbatch $script" >&2
  exit 1
}
job=${job%%;*}
echo "test_slurm: submitted $script as job $job (output: $log)"

is_running() { [ "$(job_state)" = RUNNING ]; }
has_ckpt() { grep -q '^checkpoint prefix=' "$log" 2>/dev/null; }
requeued() { [ "$(job_state)" = PENDING ] && [ "$(job_field Restarts)" = 1 ]; }
listing() { # epoch step of the latest checkpoint in the demo's chief/ (per mpickpt list --json)
  "$MPICKPT_CLI" list --json "$DEMO_DIR/chief" |
    /usr/bin/python3 -B "$here/latest_ckpt.py" epoch step
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
  echo "test_slurm: preempted at epoch=$E step=$T, requeued"
  release_and_finish test_slurm 120 || ok=0
fi
check "$([ $ok = 1 ]; echo $?)" "the job did not go through preempt -> requeue -> finish in time"

check_completed_once
split_runs "$log"
check "$(grep -q '^fresh start$' <<<"$run0"; echo $?)" "first run: no 'fresh start'"
check "$(grep -qxF "$pre" <<<"$run0"; echo $?)" "first run: no 'preempted' line"
check "$(grep -qE "^checkpoint prefix=\S+ epoch=$E step=$T " <<<"$run0"; echo $?)" \
  "first run: no checkpoint at epoch=$E step=$T"
check "$(grep -q '^mpickpt-run: got SIGUSR1: forwarding it to the job' <<<"$run0"; echo $?)" \
  "first run: mpickpt-run did not forward SIGUSR1"
check "$(grep -q "^mpickpt-run: preempted (exit 75): scontrol requeue $job\$" <<<"$run0"; echo $?)" "first run: no requeue"
check "$(absent '^done ' <<<"$run0"; echo $?)" "first run printed done"
check "$(grep -qE "^resumed epoch=$E step=$T from=$DEMO_DIR/chief/ckpt-[0-9]+$" <<<"$run1"; echo $?)" \
  "second run: no 'resumed epoch=$E step=$T from=$DEMO_DIR/chief/...'"
check "$(grep -q "^verified every restored value at step $T:" <<<"$run1"; echo $?)" "second run: not verified"
check "$(grep -qx 'done epoch=2 step=30' <<<"$run1"; echo $?)" "second run: no 'done epoch=2 step=30'"
check "$(grep -q "^mpickpt-run: run 1: $launcher exited with status 0\$" <<<"$run1"; echo $?)" \
  "second run: $launcher did not exit 0"
check "$(absent 'verification failed' "$log"; echo $?)" "verification failed"
check "$(absent -E 'AddressSanitizer|LeakSanitizer|runtime error' "$log"; echo $?)" \
  "sanitizer report in $log"

slurm_test_end "test_slurm ($launcher)" "$log"
