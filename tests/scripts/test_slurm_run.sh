#!/usr/bin/env bash
# mpickpt-run inside a real Slurm allocation (jobs/slurm/mpickpt-run.sbatch, srun --mpi=pmix):
#
#   MPICKPT_SOURCE_DIR=... MPICKPT_BINARY_DIR=... MPICKPT_CLI=.../mpickpt test_slurm_run.sh OUTDIR
#
# 1. crash and relaunch: a job whose fresh run commits ckpt-1 (epoch 0, step 5) and crashes at
#    step 7 (rank 1 aborts), --max-runs 3: mpickpt-run relaunches srun inside the same allocation,
#    the second run resumes at exactly epoch 0 step 5, verifies every value and finishes; the
#    job COMPLETED with exit code 0 and was never requeued (Restarts=0).
# 2. halt: a job held at its first checkpoint; `mpickpt halt DIR`: it takes the checkpoint and
#    exits at that step boundary (reason=halt), mpickpt-run exits 0 without requeue or relaunch:
#    COMPLETED, exit code 0, Restarts=0, one run.
# Needs root and the packages of `jobs/deps.sh slurm` (skipped, 77, without root).
set -uo pipefail
out=${1:?usage: test_slurm_run.sh OUTDIR}
: "${MPICKPT_SOURCE_DIR:?}" "${MPICKPT_BINARY_DIR:?}" "${MPICKPT_CLI:?}"
src=$MPICKPT_SOURCE_DIR
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=$src/jobs/slurm/mpickpt-run.sbatch
# shellcheck source=tests/scripts/slurm_lib.sh
. "$here/slurm_lib.sh"
slurm_test_start test_slurm_run "$out"
export MPICKPT_RUN=$MPICKPT_BINARY_DIR/bin/mpickpt-run
unset MPICKPT_DEADLINE SLURM_JOB_END_TIME MPICKPT_RUNS
demo=$MPICKPT_BINARY_DIR/bin/mpickpt-demo
is_running() { [ "$(job_state)" = RUNNING ]; }
finished_once() { # COMPLETED, exit code 0, never requeued
  echo "== job $job: scontrol show job"
  scontrol show job "$job" | grep -E 'JobState|Restarts|ExitCode' | sed 's/^ */   /'
  check "$([ "$(job_state)" = COMPLETED ]; echo $?)" "job $job: state $(job_state), expected COMPLETED"
  check "$([ "$(job_field Restarts)" = 0 ]; echo $?)" "job $job: Restarts=$(job_field Restarts), expected 0"
  check "$([ "$(job_field ExitCode)" = 0:0 ]; echo $?)" "job $job: ExitCode=$(job_field ExitCode), expected 0:0"
  check "$(absent 'SLURM_RESTART_COUNT=1' "$log"; echo $?)" "job $job ran a second time"
}

# 1. Crash and relaunch inside the allocation.
dir=$out/crash
log=$out/crash.out
job=$(cd "$out" && sbatch --parsable -n 2 -o "$log" "$script" --dir "$dir" --max-runs 3 -- \
  "$demo" --dir "$dir" --epochs 2 --steps-per-epoch 10 --ckpt-every 5 --mb 1 \
  --crash-rank 1 --crash-step 7 --crash-fresh) || { echo "FAIL: sbatch $script" >&2; exit 1; }
job=${job%%;*}
echo "test_slurm_run: submitted the crashing job as $job (output: $log)"
wait_until 120 "job $job finished" job_finished
finished_once
check "$(grep -q '^mpickpt-run: run 1 of 3 (MPICKPT_RUN_ATTEMPT=1): srun --mpi=pmix ' "$log"; echo $?)" "no 'run 1 of 3 ... srun --mpi=pmix'"
check "$(grep -q '^crash rank=1 step=7$' "$log"; echo $?)" "no crash at step 7"
check "$(grep -q '^mpickpt-run: relaunching after the crash (run 2 of 3) from the newest checkpoint: ckpt-1 (save 1, epoch 0, step 5)$' "$log"; echo $?)" \
  "no relaunch from ckpt-1"
check "$(grep -qx "resumed epoch=0 step=5 from=$dir/chief/ckpt-1" "$log"; echo $?)" "run 2 did not resume at epoch 0 step 5"
check "$(grep -q '^verified every restored value at step 5:' "$log"; echo $?)" "run 2 did not verify"
check "$(grep -qx 'done epoch=1 step=20' "$log"; echo $?)" "no 'done epoch=1 step=20'"
check "$(grep -qx 'mpickpt-run: run 2: srun exited with status 0' "$log"; echo $?)" "run 2: srun did not exit 0"
check "$(absent 'run 3 of' "$log"; echo $?)" "a third run"
echo "== job $job output ($log)"
sed 's/^/   /' "$log"

# 2. Halt.
dir=$out/halt
log=$out/halt.out
job=$(cd "$out" && sbatch --parsable -n 2 -o "$log" "$script" --dir "$dir" --max-runs 3 -- \
  "$demo" --dir "$dir" --epochs 2 --steps-per-epoch 10 --ckpt-every 5 --mb 1 --hold) ||
  { echo "FAIL: sbatch $script" >&2; exit 1; }
job=${job%%;*}
echo "test_slurm_run: submitted the job to halt as $job (output: $log)"
has_ckpt() { grep -q '^checkpoint prefix=' "$log" 2>/dev/null; }
ok=1
wait_until 60 "job $job RUNNING" is_running || ok=0
[ $ok = 1 ] && { wait_until 90 "a committed checkpoint in $log" has_ckpt || ok=0; }
if [ $ok = 1 ]; then
  "$MPICKPT_CLI" halt "$dir"
  check $? "mpickpt halt $dir"
  wait_until 90 "job $job finished" job_finished || ok=0
fi
check "$([ $ok = 1 ]; echo $?)" "the held job did not halt in time"
finished_once
check "$(grep -qx 'preempted epoch=0 step=5 reason=halt' "$log"; echo $?)" "no 'preempted epoch=0 step=5 reason=halt'"
check "$(grep -qx 'mpickpt-run: run 1: srun exited with status 75' "$log"; echo $?)" "srun did not exit 75"
check "$(grep -q "^mpickpt-run: halted by the request in $dir/chief: exit 0, no requeue, no relaunch" "$log"; echo $?)" \
  "no 'halted by the request'"
check "$(absent -e 'scontrol requeue' -e 'run 2 of' "$log"; echo $?)" "requeued or relaunched after a halt"
check "$(absent -E 'AddressSanitizer|LeakSanitizer|runtime error' "$out"/*.out; echo $?)" "sanitizer report"
slurm_test_end test_slurm_run "$log"
