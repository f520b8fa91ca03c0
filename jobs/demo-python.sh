#!/usr/bin/env bash
# jobs/demo.sh's story told with the Python package and a real PyTorch job (jobs/train_torch.py),
# from a fresh clone: installs what is missing (PyTorch included), builds, then
#   1. train_torch.py (checkpointed by mpickpt.torch.Checkpointer: model, Adam, per-rank RNGs,
#      values) trains an MLP with Adam on 4 ranks (data parallel); rank 2 kills itself
#      (SIGKILL, a simulated node failure) after step 17
#   2. mpickpt list: the checkpoints the crashed job had committed (every 5 steps)
#   3. the job is resumed on 3 ranks: it restores the latest checkpoint in place (the replicated
#      model and optimizer on every rank, Adam's state created from the checkpoint, the per-rank
#      RNG states of ranks 0-2: with 3 < 4 ranks no rank is missing, and rank 3's is not
#      needed), checks that the restored model and
#      optimizer hash to what they hashed to when saved, and trains to the end
#   4. mpickpt list again, and mpickpt verify of the latest checkpoint
# Exits 0 only when the crash happened, the resumed run restored, verified and finished, and
# verify passed.
#
#   MPICKPT_BUILD_DIR=DIR  use this existing build (no package install, no build); default: build/
#   DEMO_DIR=DIR           the checkpoint directory (emptied first); default: <build>/demo-python
#   DEMO_HIDDEN=H          hidden units per layer (default 256)
#   DEMO_STEPS=T           steps in all (default 30; the crash is at step 17, so T > 17)
# The full output of each run (mpirun's messages included) goes to DEMO_DIR-logs/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ -n "${MPICKPT_BUILD_DIR:-}" ]; then
  bdir=$(cd "$MPICKPT_BUILD_DIR" && pwd)
  echo "== using the build in $bdir"
else
  bdir=$root/build
  "$root/jobs/deps.sh" python
  echo "== building (build/)"
  "$root/jobs/build.sh"
fi
cli=$bdir/bin/mpickpt
py=/usr/bin/python3 # Debian's interpreter: its numpy, mpi4py and torch
job=$root/jobs/train_torch.py
[ -x "$cli" ] || { echo "demo-python.sh: $cli is missing (build first)" >&2; exit 1; }
[ -f "$bdir/python/mpickpt/__init__.py" ] || {
  echo "demo-python.sh: $bdir/python/mpickpt is missing: the build found no python3-dev, numpy" \
       "or mpi4py (jobs/deps.sh python installs them; then build again)" >&2; exit 1; }
export PYTHONPATH=$bdir/python${PYTHONPATH:+:$PYTHONPATH}
"$py" -c 'import torch, mpickpt' 2>/dev/null || {
  echo "demo-python.sh: $py cannot import torch and mpickpt (jobs/deps.sh python)" >&2; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
# When a rank dies, mpirun kills the others at once instead of after a grace period.
export OMPI_MCA_odls_base_sigkill_timeout=0
ulimit -c 0

out=${DEMO_DIR:-$bdir/demo-python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Start from nothing, but never empty a directory that is not a checkpoint directory of ours.
if [ -n "$(ls -A "$out")" ] && [ ! -f "$out/checkpoint" ] && ! ls "$out"/ckpt-*.index >/dev/null 2>&1
then
  echo "demo-python.sh: $out is not empty and holds no checkpoints; refusing to clear it" >&2
  exit 1
fi
logs=$out-logs
rm -rf "$out" "$logs"
mkdir -p "$out" "$logs"
steps=${DEMO_STEPS:-30}
[ "$steps" -gt 17 ] 2>/dev/null || { echo "demo-python.sh: DEMO_STEPS must be > 17" >&2; exit 2; }
args=(--dir "$out" --steps "$steps" --ckpt-every 5 --keep 3 --hidden "${DEMO_HIDDEN:-256}")

# The job's own lines (and library warnings); losses only every 5th step; the rest stays in the log.
ours='^(fresh start|resumed |verified |checkpoint |crash |done |preempted |train_torch.py: |step [0-9]*[05] |\[mpickpt |Traceback)'
show() { # log-file: prints the job's lines of a run, indented, as they come
  tee "$1" | { grep -E --line-buffered "$ours" || true; } | sed -u 's/^/   /'
}
fail() { echo "== DEMO FAILED: $*" >&2; exit 1; }

echo
echo "== 1. train on 4 ranks: $steps steps of Adam on an MLP, a checkpoint every 5 steps"
echo "==    (mpickpt.torch.Checkpointer: model, optimizer, per-rank RNG states, values);"
echo "==    rank 2 kills itself (SIGKILL) after step 17 (a simulated node failure)"
set +e
mpirun -np 4 "$py" "$job" "${args[@]}" --crash-rank 2 --crash-step 17 2>&1 | show "$logs/1-crash.log"
rc=${PIPESTATUS[0]}
set -e
grep -q '^crash rank=2 step=17$' "$logs/1-crash.log" ||
  fail "the run did not crash at step 17 (log: $logs/1-crash.log)"
[ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 2 was killed (log: $logs/1-crash.log)"
echo "   -> mpirun exited with status $rc, as expected: the job died with rank 2"
echo "      (mpirun's messages are in $logs/1-crash.log)"

echo
echo "== 2. the checkpoints the crashed job committed: mpickpt list $out"
"$cli" list "$out" | sed 's/^/   /' || fail "mpickpt list failed"

echo
echo "== 3. resume on 3 ranks (a different count): restore the latest checkpoint in place, check"
echo "==    it against the hash taken when it was saved, finish training"
set +e
mpirun -np 3 "$py" "$job" "${args[@]}" 2>&1 | show "$logs/3-resume.log"
rc=${PIPESTATUS[0]}
set -e
log=$logs/3-resume.log
! grep -q 'verification failed' "$log" || fail "the restored model is not the saved one (log: $log)"
[ "$rc" -eq 0 ] || fail "the resumed run exited with status $rc (log: $log)"
resumed=$(grep -E '^resumed step=[0-9]+ .*world_size=4 ' "$log" | head -1) ||
  fail "the run did not resume from a 4-rank checkpoint (log: $log)"
rstep=$(sed -E 's/^resumed step=([0-9]+) .*/\1/' <<<"$resumed")
rhash=$(sed -E 's/.* hash=([0-9a-f]+)$/\1/' <<<"$resumed")
grep -qE "^checkpoint .* step=$rstep .*hash=$rhash\$" "$logs/1-crash.log" ||
  fail "step $rstep's checkpoint hashed to something else when the crashed run saved it"
grep -q '^verified the restored model' "$log" || fail "the restore was not verified (log: $log)"
grep -q "^done step=$steps " "$log" || fail "the run did not finish (log: $log)"
[ "$(grep -c '^step ' "$log")" -eq $((steps - rstep)) ] ||
  fail "the resumed run did not train exactly steps $((rstep + 1))..$steps (log: $log)"

echo
echo "== 4. the checkpoints now: mpickpt list $out"
"$cli" list "$out" | sed 's/^/   /' || fail "mpickpt list failed"
latest=$(grep -E '^checkpoint prefix=' "$log" | tail -1 | sed -E 's/^checkpoint prefix=([^ ]*).*/\1/')
[ -n "$latest" ] || fail "the resumed run wrote no checkpoint (log: $log)"
echo "== mpickpt verify $latest  (re-reads every piece and checks its CRC-32C)"
"$cli" verify "$latest" 2>&1 | sed 's/^/   /' || fail "verify of $latest failed"

echo
echo "== demo passed: the PyTorch job was killed after step 17 on 4 ranks, resumed on 3 from its"
echo "   checkpoint of step $rstep (model and optimizer as saved, RNG state of ranks 0-2), and"
echo "   finished; the latest checkpoint verifies."
