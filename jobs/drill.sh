#!/usr/bin/env bash
# Recovery drills: break a checkpointing job on purpose, restart it, and check that it recovers.
#
#   jobs/drill.sh [--np N] [--layout shared|per-rank] [--async|--sync] [--only NAME[,NAME...]]
#                 [--skip NAME[,NAME...]]
#                 [--table FILE] [--work DIR] [--list] [-- extra mpickpt-demo args]
#
# Every drill runs the demo training job (build/bin/mpickpt-demo) into a fresh directory under the
# work dir, breaks something (kills a rank in the middle of a save, damages the latest checkpoint,
# fills the disk, loses a node's cache), restarts the job (sometimes on another number of ranks) and
# checks that the restart
#   - resumes from the newest VALID checkpoint: `resumed epoch=E step=T from=<that prefix>`, where
#     the drill computes that checkpoint itself, before the damage or from what was committed
#     before the kill (every *.index on disk that `mpickpt verify` accepts, minus what it damaged);
#   - restores exact values (the demo checks every value: no `verification failed`), never loads
#     a damaged checkpoint, finishes (`done`), leaves no debris of the broken save behind
#     (`*_temp/`, data files without an index, `*.tmp-<pid>`, files in `workertemp_*/`), and that
#     `mpickpt verify` of the final latest checkpoint passes.
# One table row per drill: name | what was broken | expected resume point | actual | PASS/FAIL/
# SKIPPED. Exit status 0 when no drill failed (SKIPPED is not a failure), 1 otherwise, 2 usage.
#
#   --np N          ranks of the job (default 4; more than the cores is fine: oversubscribed)
#   --layout L      data layout of every run (default per-rank)
#   --sync/--async  run the drills in that save mode only. Default: both; the async rows are
#                   SKIPPED (async not available) when the demo has no async saver (probed once)
#   --only NAMES    only these drills (comma-separated; shell patterns allowed: 'kill-*')
#   --skip NAMES    not these drills (the same patterns)
#   --table FILE    also write the table as Markdown to FILE
#   --work DIR      work dir (default build/drills; its sync/ and async/ subdirs are recreated)
#   --list          print the drills and what each breaks, and exit
#   -- ARGS         extra mpickpt-demo arguments for every run (e.g. -- --mb 4 --keep 5); the drill
#                   owns --dir, --epochs, --layout, --async and --crash-*
#
# Environment: MPICKPT_BUILD_DIR=DIR use that build (default build/, built if the programs are
# missing); MPIEXEC (default mpirun); DRILL_RUN_TIMEOUT seconds per mpirun (default 60; a run
# that takes longer is killed and counts as a hang). Needs Debian's /usr/bin/python3 (and
# python3-h5py for the flip-byte drill). The full-disk drill mounts a tmpfs and needs root (else
# SKIPPED); it is unmounted on exit, also after a failure or Ctrl-C.
# Each run's full output goes to WORK/<mode>/<drill>/NN-<what>.log. See docs/drills.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

for a in "$@"; do
  [ "$a" = "--" ] && break
  if [ "$a" = "-h" ] || [ "$a" = "--help" ]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
  fi
done

if [ -n "${MPICKPT_BUILD_DIR:-}" ]; then
  bdir=$(cd "$MPICKPT_BUILD_DIR" && pwd)
else
  bdir=$root/build
  if [ ! -x "$bdir/bin/mpickpt-demo" ] || [ ! -x "$bdir/bin/mpickpt" ]; then
    "$root/jobs/deps.sh" build
    echo "== building (build/)"
    "$root/jobs/build.sh"
  fi
fi
for exe in "$bdir/bin/mpickpt-demo" "$bdir/bin/mpickpt"; do
  [ -x "$exe" ] || { echo "drill.sh: $exe is missing (build first)" >&2; exit 1; }
done
[ -x /usr/bin/python3 ] || { echo "drill.sh: needs /usr/bin/python3 (jobs/deps.sh test)" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
# A killed rank takes the job down in ~20 ms instead of after a grace period.
export OMPI_MCA_odls_base_sigkill_timeout=0
ulimit -c 0 # the crashes are deliberate: no core files

# tmpfs mounts of the full-disk drill: the Python side records each mount point here and unmounts
# it itself; this trap catches whatever is left (the script killed, an unexpected error).
mounts=$(mktemp "${TMPDIR:-/tmp}/mpickpt-drill-mounts.XXXXXX")
cleanup() {
  local m
  while IFS= read -r m; do
    [ -n "$m" ] && mountpoint -q "$m" 2>/dev/null && { umount "$m" 2>/dev/null || umount -l "$m" || true; }
  done <"$mounts"
  rm -f "$mounts"
}
trap cleanup EXIT

# The drills run in Python (jobs/lib/drill.py; -B: no __pycache__ in the source tree), in the
# background so that this shell can pass on SIGINT/SIGTERM at once: Python then stops the running
# job and unmounts before it exits.
set +e
MPICKPT_DRILL_MOUNTS=$mounts MPICKPT_DEMO=$bdir/bin/mpickpt-demo MPICKPT_CLI=$bdir/bin/mpickpt \
  MPICKPT_ROOT=$root /usr/bin/python3 -B "$root/jobs/lib/drill.py" "$@" &
py=$!
trap 'kill -TERM $py 2>/dev/null; wait $py; exit 130' INT
trap 'kill -TERM $py 2>/dev/null; wait $py; exit 143' TERM
wait $py
rc=$?
set -e
exit $rc
