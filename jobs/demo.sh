#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds, then tells the story of a
# training job that loses a node and resumes on a different number of ranks:
#   1. mpickpt-demo trains on 4 ranks; rank 2 aborts at global step 17 (a simulated node failure)
#   2. mpickpt list: the checkpoints the crashed job had committed
#   3. the job is resumed on 3 ranks: it restores the latest checkpoint (resharding the model from
#      4 to 3 ranks), checks every restored value and finishes training
#   4. mpickpt list again, and mpickpt verify of the latest checkpoint
# Exits 0 only when the crash happened, the resumed run restored, verified and finished, and
# verify passed.
#
#   MPICKPT_BUILD_DIR=DIR  use this existing build (no package install, no build); default: build/
#   DEMO_DIR=DIR           the training-state directory (emptied first); default: <build>/demo
#   DEMO_MB=M              model size passed as --mb (default 4: ~4 MiB of state per rank at 4 ranks)
# The full output of each run (mpirun's messages included) goes to DEMO_DIR-logs/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ -n "${MPICKPT_BUILD_DIR:-}" ]; then
  bdir=$(cd "$MPICKPT_BUILD_DIR" && pwd)
  echo "== using the build in $bdir"
else
  bdir=$root/build
  "$root/jobs/deps.sh" build
  echo "== building (build/)"
  "$root/jobs/build.sh"
fi
demo=$bdir/bin/mpickpt-demo
cli=$bdir/bin/mpickpt
for exe in "$demo" "$cli"; do
  [ -x "$exe" ] || { echo "demo.sh: $exe is missing (build first)" >&2; exit 1; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
# When a rank dies, mpirun kills the others at once instead of after a grace period.
export OMPI_MCA_odls_base_sigkill_timeout=0
ulimit -c 0 # the crash is deliberate: no core file

out=${DEMO_DIR:-$bdir/demo}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Start from nothing, but never empty a directory that is not a demo's.
if [ -n "$(ls -A "$out")" ] && [ ! -d "$out/chief" ]; then
  echo "demo.sh: $out is not empty and holds no training state (chief/); refusing to clear it" >&2
  exit 1
fi
logs=$out-logs
rm -rf "$out" "$logs"
mkdir -p "$out" "$logs"
mb=${DEMO_MB:-4}
args=(--dir "$out" --epochs 3 --steps-per-epoch 10 --ckpt-every 5 --keep 3 --mb "$mb")

# The demo's own lines (and library warnings); everything else stays in the log.
ours='^(fresh start|resumed |verified |checkpoint |crash |done |mpickpt-demo: |\[mpickpt )'
show() { # log-file: prints the demo's lines of a run, indented, as they come
  tee "$1" | { grep -E --line-buffered "$ours" || true; } | sed -u 's/^/   /'
}
fail() { echo "== DEMO FAILED: $*" >&2; exit 1; }

echo
echo "== 1. train on 4 ranks: 3 epochs x 10 steps, a checkpoint every 5 steps and at each epoch end;"
echo "==    rank 2 crashes at step 17 (a simulated node failure)"
set +e
mpirun -np 4 "$demo" "${args[@]}" --crash-rank 2 --crash-step 17 2>&1 | show "$logs/1-crash.log"
rc=${PIPESTATUS[0]}
set -e
grep -q '^crash rank=2 step=17$' "$logs/1-crash.log" || fail "the run did not crash at step 17 (log: $logs/1-crash.log)"
[ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 2 crashed (log: $logs/1-crash.log)"
echo "   -> mpirun exited with status $rc, as expected: the job died with rank 2"
echo "      (mpirun's abort messages are in $logs/1-crash.log)"

echo
echo "== 2. the checkpoints the crashed job committed: mpickpt list $out"
"$cli" list "$out" | sed 's/^/   /' || fail "mpickpt list failed"

echo
echo "== 3. resume on 3 ranks (a different count): restore the latest checkpoint, check every"
echo "==    restored value, finish training"
set +e
mpirun -np 3 "$demo" "${args[@]}" 2>&1 | show "$logs/3-resume.log"
rc=${PIPESTATUS[0]}
set -e
log=$logs/3-resume.log
! grep -q 'verification failed' "$log" || fail "restored values are wrong (log: $log)"
[ "$rc" -eq 0 ] || fail "the resumed run exited with status $rc (log: $log)"
grep -q '^resumed epoch=[0-9]* step=[0-9]* from=' "$log" || fail "the run did not resume (log: $log)"
grep -q '^done epoch=2 step=30$' "$log" || fail "the run did not finish (log: $log)"

echo
echo "== 4. the checkpoints now: mpickpt list $out"
"$cli" list "$out" | sed 's/^/   /' || fail "mpickpt list failed"
latest=$(grep -E '^(checkpoint prefix=|resumed .* from=)' "$log" | tail -1 |
         sed -E 's/^checkpoint prefix=([^ ]*).*/\1/; s/^resumed .* from=(.*)$/\1/')
echo "== mpickpt verify $latest  (re-reads every piece and checks its CRC-32C)"
"$cli" verify "$latest" 2>&1 | sed 's/^/   /' || fail "verify of $latest failed"

echo
echo "== demo passed: the job crashed at step 17 on 4 ranks, resumed on 3 from its last checkpoint"
echo "   with every value checked, and finished; the latest checkpoint verifies."
