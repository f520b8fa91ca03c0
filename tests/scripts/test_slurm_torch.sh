#!/usr/bin/env bash
# The PyTorch job (jobs/train_torch.py) under Slurm through jobs/slurm/mpickpt-run.sbatch
# (mpickpt-run --launcher mpirun -- /usr/bin/python3 train_torch.py ...): preempted,
# it checkpoints, requeues itself and resumes, and its losses after the resume are, bit for bit,
# those of the same job run without interruption:
#
#   MPICKPT_SOURCE_DIR=... MPICKPT_BINARY_DIR=... MPICKPT_CLI=.../mpickpt MPIEXEC=mpirun \
#     PYTHONPATH=build/python test_slurm_torch.sh OUTDIR
#
# 1. starts a private single-node Slurm in OUTDIR/slurm (tests/scripts/slurm_lib.sh);
# 2. submits it on 2 tasks: 30 steps, a checkpoint every 5, a fresh run holds after
#    step 10 until preempted (--hold-at: the signal cannot come too late, however slow the machine);
# 3. once it holds, preempts it: scancel --signal=USR1 --batch (mpickpt-run, the batch shell's
#    process, forwards SIGUSR1 to mpirun, mpirun to the ranks; train_torch.py's collective check sees it at the step boundary);
# 4. checks: `preempted step=10`, the latest checkpoint in `mpickpt list` is step 10, the job
#    requeued itself (PENDING, Restarts=1); released, it ran again with SLURM_RESTART_COUNT=1,
#    resumed at step 10 on 2 ranks, verified the restored model and optimizer, finished at step 30,
#    COMPLETED with exit code 0;
# 5. runs the same job once more, uninterrupted, with mpirun outside Slurm, and compares the loss
#    printed at every step 1-30 and the final hash: identical.
# Needs root, the Slurm packages (jobs/deps.sh slurm) and PyTorch (without it: skipped, 77).
set -uo pipefail
out=${1:?usage: test_slurm_torch.sh OUTDIR}
: "${MPICKPT_SOURCE_DIR:?}" "${MPICKPT_BINARY_DIR:?}" "${MPICKPT_CLI:?}" "${MPIEXEC:?}"
src=$MPICKPT_SOURCE_DIR
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "test_slurm_torch: no PyTorch: skipped"; exit 77; }
# shellcheck source=tests/scripts/slurm_lib.sh
. "$here/slurm_lib.sh"
slurm_test_start test_slurm_torch "$out"

args="--steps 30 --ckpt-every 5 --keep 0 --hidden 32"
TRAIN_DIR=$out/train
# The job's environment (sbatch passes it on): the package from the build, the launcher.
export PYTHONPATH=$MPICKPT_BINARY_DIR/python${PYTHONPATH:+:$PYTHONPATH}
export MPICKPT_RUN=$MPICKPT_BINARY_DIR/bin/mpickpt-run
unset MPICKPT_DEADLINE SLURM_JOB_END_TIME MPICKPT_RUNS
script=$src/jobs/slurm/mpickpt-run.sbatch
log=$out/job.out
# shellcheck disable=SC2086 # $args is a list of options
job=$(cd "$out" && sbatch --parsable -n 2 -o "$log" "$script" --launcher mpirun --dir "$TRAIN_DIR" \
  -- "$py" "$src/jobs/train_torch.py" --dir "$TRAIN_DIR" $args --hold-at 10) || {
  echo "FAIL: sbatch $script" >&2
  exit 1
}
job=${job%%;*}
echo "test_slurm_torch: submitted $script as job $job (output: $log)"

holding() { grep -q '^holding at step=10 until preempted$' "$log" 2>/dev/null; }
holding_or_over() { holding || job_finished; }
requeued() { [ "$(job_state)" = PENDING ] && [ "$(job_field Restarts)" = 1 ]; }
latest_step() {
  "$MPICKPT_CLI" list --json "$TRAIN_DIR" | "$py" -B "$here/latest_ckpt.py" step
}
losses() { grep -E '^(step [0-9]+ loss |done )' "$1"; } # the trajectory and the final hash

ok=1
# 1-2 minutes when loaded: the job imports PyTorch and mpi4py on 2 ranks before its first step.
wait_until 240 "job $job holding at step 10 ($log)" holding_or_over || ok=0
holding || { ok=0; echo "FAIL: job $job is $(job_state) and never held at step 10" >&2; }
if [ $ok = 1 ]; then
  echo "test_slurm_torch: job $job holds at step 10: scancel --signal=USR1 --batch $job"
  scancel --signal=USR1 --batch "$job"
  check $? "scancel --signal=USR1 --batch $job"
  wait_until 120 "job $job preempted and requeued (PENDING, Restarts=1)" requeued || ok=0
fi
check "$(grep -qx 'preempted step=10' "$log"; echo $?)" "no 'preempted step=10' in $log"
if [ $ok = 1 ]; then
  latest=$(latest_step)
  check "$([ "$latest" = 10 ]; echo $?)" "mpickpt list: the latest checkpoint is step '$latest', not 10"
  echo "test_slurm_torch: preempted at step 10, requeued"
  release_and_finish test_slurm_torch 240 || ok=0
fi
check "$([ $ok = 1 ]; echo $?)" "the job did not go through preempt -> requeue -> finish in time"

check_completed_once
split_runs "$log"
check "$(grep -qx 'fresh start' <<<"$run0"; echo $?)" "first run: no 'fresh start'"
check "$(grep -qE '^checkpoint prefix=\S+ step=10 ' <<<"$run0"; echo $?)" "first run: no checkpoint at step 10"
check "$(absent -E '^step 1[1-9] ' <<<"$run0"; echo $?)" "first run went past step 10"
check "$(grep -q "^mpickpt-run: preempted (exit 75): scontrol requeue $job\$" <<<"$run0"; echo $?)" "first run: no requeue"
check "$(grep -qE "^resumed step=10 epoch=0 from=$TRAIN_DIR/ckpt-[0-9]+ world_size=2 " <<<"$run1"; echo $?)" \
  "second run: no 'resumed step=10 epoch=0 from=$TRAIN_DIR/ckpt-N world_size=2'"
check "$(grep -q '^verified the restored model and optimizer' <<<"$run1"; echo $?)" "second run: not verified"
check "$(absent -E '^step ([1-9]|10) ' <<<"$run1"; echo $?)" "second run repeated a step <= 10"
check "$(grep -qE '^done step=30 ' <<<"$run1"; echo $?)" "second run: no 'done step=30'"
check "$(grep -q '^mpickpt-run: run 1: mpirun exited with status 0$' <<<"$run1"; echo $?)" "second run: mpirun did not exit 0"

# The same job uninterrupted, outside Slurm: the same losses at every step, bit for bit.
ref=$out/reference.out
echo "test_slurm_torch: the reference run: $MPIEXEC -np 2 $py train_torch.py --dir $out/ref $args"
# shellcheck disable=SC2086 # $args is a list of options
timeout 300 \
  "$MPIEXEC" -np 2 "$py" "$src/jobs/train_torch.py" --dir "$out/ref" $args >"$ref" 2>&1
check $? "the reference run failed (see $ref)"
n=$(losses "$ref" | grep -c '^step ')
check "$([ "$n" = 30 ]; echo $?)" "the reference run printed $n losses, expected 30"
if [ "$(losses "$ref")" = "$(losses "$log")" ]; then
  echo "test_slurm_torch: the losses of steps 1-30 and the final hash equal the uninterrupted run's"
else
  check 1 "the preempted and resumed job's losses differ from the uninterrupted run's:"
  diff <(losses "$ref") <(losses "$log") | head -20 >&2
fi

slurm_test_end test_slurm_torch "$log"
