#!/usr/bin/env bash
# Runs a job under mpirun on a machine without Slurm, and relaunches it when it was preempted, the
# way a Slurm requeue would:
#
#   jobs/run-mpirun.sh [COMMAND [ARGS...]]
#
# Without COMMAND it runs the demo training job: <build>/bin/mpickpt-demo --dir "$DEMO_DIR" $DEMO_ARGS.
#
#   NP=N                 ranks (default: the number of CPUs, at least 2)
#   RESTARTS=N           relaunches after a preemption (exit 75) at most (default 3)
#   MPIRUN_ARGS="..."    extra mpirun arguments (split on spaces)
#   MPICKPT_BUILD_DIR    the build whose bin/mpickpt-demo runs (default: build/ of this checkout)
#   DEMO_DIR             training-state directory of the demo (default: <build>/demo-mpirun)
#   DEMO_ARGS="..."      the demo's other arguments (default: 3 epochs x 10 steps, --mb 4)
#
# Root and more ranks than cores are allowed (OMPI_ALLOW_RUN_AS_ROOT*, oversubscribe, yield when
# idle). Each launch sees MPICKPT_RESTART_COUNT (0, 1, ...), like Slurm's SLURM_RESTART_COUNT.
#
# Signals (send them to this script, not to mpirun):
#   SIGUSR1  preempt: forwarded to mpirun, which forwards it to every rank; the job takes its final
#            checkpoint and exits 75 (CKPT_EXIT_PREEMPTED); this script relaunches it and it resumes
#            from that checkpoint -- what a Slurm requeue does.
#   SIGTERM  checkpoint and stop: forwarded to mpirun as SIGUSR1 (mpirun would kill the ranks on a
#            SIGTERM instead of forwarding it); the job checkpoints, exits 75, and this script exits
#            75 without relaunching (run it again to resume).
# A job that exits 75 by itself (its deadline, MPICKPT_DEADLINE, was near) is relaunched too.
# Exit status: the job's last status (0 when it finished; 75 when still preempted after RESTARTS
# relaunches or stopped by SIGTERM).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "run-mpirun: $*" >&2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1

np=${NP:-$(nproc 2>/dev/null || echo 2)}
[ "$np" -ge 2 ] 2>/dev/null || np=2
restarts=${RESTARTS:-3}
case "$restarts" in '' | *[!0-9]*) say "RESTARTS must be a non-negative integer, got '$restarts'"; exit 2 ;; esac

if [ $# -gt 0 ]; then
  cmd=("$@")
else
  bdir=${MPICKPT_BUILD_DIR:-$root/build}
  demo=$bdir/bin/mpickpt-demo
  [ -x "$demo" ] || { say "$demo is missing (build first: jobs/build.sh)"; exit 1; }
  # shellcheck disable=SC2206 # DEMO_ARGS is a space-separated list of options
  cmd=("$demo" --dir "${DEMO_DIR:-$bdir/demo-mpirun}"
       ${DEMO_ARGS:---epochs 3 --steps-per-epoch 10 --ckpt-every 5 --mb 4})
fi
# shellcheck disable=SC2206
extra=(${MPIRUN_ARGS:-})

pid=
stop=0 # set by SIGTERM: checkpoint and stop, no relaunch
# shellcheck disable=SC2317 # called by the traps below
forward() { # the signal this script got
  [ "$1" = TERM ] && stop=1
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    say "got SIG$1: forwarding SIGUSR1 to mpirun (pid $pid)"
    kill -USR1 "$pid" 2>/dev/null || true
  else
    say "got SIG$1 between launches"
  fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

rc=0
for ((run = 0; run <= restarts; run++)); do
  if [ "$stop" = 1 ]; then
    break
  fi
  say "launch $((run + 1)) (MPICKPT_RESTART_COUNT=$run): mpirun -np $np ${extra[*]:+${extra[*]} }${cmd[*]}"
  MPICKPT_RESTART_COUNT=$run mpirun -np "$np" "${extra[@]}" "${cmd[@]}" &
  pid=$!
  # wait returns early (status > 128) whenever a trapped signal arrives: wait again until mpirun
  # is really gone (a zombie still answers kill -0, so its status is never lost).
  while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  pid=
  if [ "$rc" -ne 75 ]; then
    say "the job exited with status $rc"
    exit "$rc"
  fi
  if [ "$stop" = 1 ]; then
    say "the job was preempted (exit 75) after SIGTERM: not relaunching; run again to resume"
    exit 75
  fi
  if [ "$run" -lt "$restarts" ]; then
    say "the job was preempted (exit 75): relaunching it ($((run + 1)) of $restarts)"
  fi
done
say "the job was still preempted (exit 75) after $restarts relaunch(es): giving up"
exit 75
