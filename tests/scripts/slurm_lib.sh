# shellcheck shell=bash
# What the Slurm tests share (sourced by test_slurm.sh and test_slurm_torch.sh): checks, polling,
# and a private single-node Slurm in OUTDIR/slurm that is always stopped.
#
#   slurm_test_start NAME OUTDIR   skips (77) unless root, fails without the Slurm commands,
#                                  empties OUTDIR, starts the Slurm (stopped on exit), exports
#                                  SLURM_CONF; sets $out (absolute) and $sdir
#   check STATUS MESSAGE           counts a check; STATUS != 0 is a failure (MESSAGE printed)
#   absent GREP-ARGS...            0 when nothing matches
#   wait_until TIMEOUT-S DESCRIPTION COMMAND...   polls COMMAND every 0.2 s
#   job_state / job_field NAME     of $job (scontrol show job)
#   job_finished                   $job is in a final state
#   release_and_finish NAME TIMEOUT-S   releases the requeued $job at once and waits until it
#                                  finished; 1 when it did not in time
#   check_completed_once           $job COMPLETED with exit code 0 after exactly one requeue (and
#                                  no third run in $log)
#   split_runs LOG                 sets $run0 and $run1: the two runs in the (appended) output
#   slurm_test_end NAME LOG        prints the job's output (and the daemons' logs on failure),
#                                  the count; returns 0 when every check passed
: "${MPICKPT_SOURCE_DIR:?}"
local_slurm=$MPICKPT_SOURCE_DIR/jobs/slurm/local-slurm.sh
failures=0
checks=0
job=

check() {
  checks=$((checks + 1))
  if [ "$1" -ne 0 ]; then
    failures=$((failures + 1))
    echo "FAIL: $2" >&2
  fi
}
absent() { ! grep -q "$@"; }
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

job_state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_field() { scontrol show job "$job" 2>/dev/null | grep -o "$1=[^ ]*" | head -1 | cut -d= -f2; }
job_finished() {
  case "$(job_state)" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;; esac
  return 1
}

slurm_test_cleanup() {
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

slurm_test_start() { # NAME OUTDIR
  local name=$1 cmd
  if [ "$(id -u)" -ne 0 ]; then
    echo "$name: needs root (slurmd runs the jobs): skipped"
    exit 77
  fi
  for cmd in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
    command -v "$cmd" >/dev/null 2>&1 || {
      echo "$name: $cmd is missing: install the Slurm packages (jobs/deps.sh slurm)" >&2
      exit 1
    }
  done
  rm -rf "$2"
  mkdir -p "$2"
  out=$(cd "$2" && pwd)
  sdir=$out/slurm
  trap slurm_test_cleanup EXIT
  trap 'exit 1' INT TERM
  # What only these tests need, passed on to the jobs by sbatch: root, more ranks than the 2
  # CPUs, ranks that yield when idle (srun on oversubscribed CPUs).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
  MPICKPT_SLURM_OWNER_PID=$$ "$local_slurm" start "$sdir" || exit 1
  eval "$("$local_slurm" env "$sdir")"
  export SLURM_CONF
}

release_and_finish() { # NAME TIMEOUT-S
  # Slurm revokes the old run's credential when the job is requeued, with one-second resolution: a
  # run started within the same second is refused for good ("Job credential revoked", the job
  # FAILS). The requeue set BeginTime to cred_expire (10 s) later; skip most of that, not all.
  sleep 2
  echo "$1: releasing job $job (scontrol update StartTime=now)"
  scontrol update JobId="$job" StartTime=now
  wait_until "$2" "job $job finished" job_finished
}

check_completed_once() {
  echo "== job $job: scontrol show job (after)"
  scontrol show job "$job" | grep -E 'JobState|Restarts|ExitCode' | sed 's/^ */   /'
  check "$([ "$(job_state)" = COMPLETED ]; echo $?)" "job state $(job_state), expected COMPLETED"
  check "$([ "$(job_field Restarts)" = 1 ]; echo $?)" "Restarts=$(job_field Restarts), expected 1"
  check "$([ "$(job_field ExitCode)" = 0:0 ]; echo $?)" "ExitCode=$(job_field ExitCode), expected 0:0"
  check "$(absent 'SLURM_RESTART_COUNT=2' "$log"; echo $?)" "the job ran a third time"
}

split_runs() { # LOG
  run0=$(sed -n '/start SLURM_RESTART_COUNT=0 /,/start SLURM_RESTART_COUNT=1 /p' "$1")
  run1=$(sed -n '/start SLURM_RESTART_COUNT=1 /,$p' "$1")
  check "$(grep -q 'start SLURM_RESTART_COUNT=0 ' <<<"$run0"; echo $?)" "first run: no SLURM_RESTART_COUNT=0"
  check "$(grep -q 'start SLURM_RESTART_COUNT=1 ' <<<"$run1"; echo $?)" "second run: no SLURM_RESTART_COUNT=1"
}

slurm_test_end() { # NAME LOG
  echo "== job $job output ($2)"
  sed 's/^/   /' "$2"
  if [ $failures -ne 0 ]; then
    echo "== slurmctld log (tail)"
    tail -20 "$sdir/log/slurmctld.log" 2>/dev/null | sed 's/^/   /'
    echo "== slurmd log (tail)"
    tail -20 "$sdir/log/slurmd.log" 2>/dev/null | sed 's/^/   /'
  fi
  echo "$1: $((checks - failures))/$checks checks passed"
  [ $failures -eq 0 ]
}
