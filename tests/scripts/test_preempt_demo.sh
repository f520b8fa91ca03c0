#!/usr/bin/env bash
# Preemption of the demo training job, end to end with mpirun (no Slurm), and jobs/run-mpirun.sh:
#
#   MPICKPT_DEMO=.../mpickpt-demo MPICKPT_CLI=.../mpickpt MPIEXEC=mpirun MPICKPT_SOURCE_DIR=... \
#     test_preempt_demo.sh OUTDIR
#
# The runs preempted by a signal use the demo's --hold: a fresh run waits at its first checkpoint
# (step 4) until it is preempted, so the signal always arrives at that step, however slow the
# machine or the test is (no race between the run's end and the signal).
# 1. SIGUSR1 to mpirun (which forwards it to the ranks) once the run committed a checkpoint: exit 75,
#    `checkpoint ... epoch=0 step=4` then `preempted epoch=0 step=4 reason=signal`, no `done`;
#    `mpickpt list` has that checkpoint as the latest; a resume on another rank count continues
#    from exactly that step (`resumed epoch=0 step=4`), verifies every value and finishes.
# 2. SIGTERM to one rank only (what Slurm and srun deliver to tasks): every rank stops, exit 75.
# 3. Deadline: MPICKPT_DEADLINE 3 s ahead with --deadline-reserve 1 stops the run by itself
#    (`reason=deadline`, exit 75) before its end (--step-sleep makes the run take at least 7.2 s;
#    a slower machine only reaches the deadline at an earlier step); a deadline already past
#    stops it after the first step; the resume without a deadline finishes.
# 4. jobs/run-mpirun.sh: SIGUSR1 to the launcher -> the job is preempted (75) and relaunched
#    (MPICKPT_RESTART_COUNT=1; the resumed run does not hold), resumes from that step and
#    finishes, exit 0; SIGTERM to the launcher
#    -> preempted, not relaunched, exit 75; RESTARTS=0 and a job preempted by its deadline -> 75.
# 5. Options: --step-sleep / --deadline-reserve take non-negative integers (exit 2 otherwise) and
#    are in --help, with --hold.
# Every run: checkpoint steps strictly increase (a preemption right after a backup takes no second
# one), no sanitizer report.
set -euo pipefail
out=${1:?usage: test_preempt_demo.sh OUTDIR}
: "${MPICKPT_DEMO:?}" "${MPICKPT_CLI:?}" "${MPICKPT_SOURCE_DIR:?}"
export MPIEXEC=${MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_odls_base_sigkill_timeout=0
unset MPICKPT_DEADLINE SLURM_JOB_END_TIME
ulimit -c 0
rm -rf "$out"
mkdir -p "$out"

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_preempt_demo_checks.py" "$out" </dev/null
