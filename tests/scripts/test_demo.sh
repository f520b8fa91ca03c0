#!/usr/bin/env bash
# The demo training job's crash/resume flows, end to end with mpirun (small sizes):
#
#   MPICKPT_DEMO=.../mpickpt-demo MPICKPT_CLI=.../mpickpt MPIEXEC=mpirun test_demo.sh OUTDIR
#
# 1. crash + resume on fewer ranks (per-rank layout): 4 ranks, rank 3 aborts mid-epoch at step 10
#    -> `crash rank=3 step=10`, mpirun exits non-zero, the committed checkpoints are those of
#    steps 4, 6, 8 (`mpickpt list --json`); resume on 2 ranks -> `resumed epoch=1 step=8
#    from=<the latest listed>`, values verified, the checkpoints of steps 12, 16, 18 and
#    `done epoch=2 step=18`; resuming the finished run restores its last checkpoint, trains no
#    step, writes no checkpoint and prints `done epoch=2 step=18` again.
# 2. resume on more ranks (shared layout): 2 ranks crash at step 13, 4 ranks resume; ranks 2-3
#    did not exist in the writer: their RNG/data-loader state starts fresh, the rest is checked.
# 3. damaged latest checkpoint: after a crash, one byte of the latest checkpoint's kernel data is
#    flipped -> the resume warns that it skips it (naming it), restores the previous one, verifies
#    and finishes; the same with the latest's data file truncated.
# 4. negatives: resuming with another --mb (shapes differ) is a clear error naming the tensor and
#    both shapes, exit 1; MPICKPT_DEMO_TAMPER=<rank> (one restored value changed before the
#    check) makes every rank fail with `verification failed` naming that rank; --async crashes and
#    resumes on another rank count
#    with its message; a bad option exits 2.
#
# Runs in Debian's /usr/bin/python3 (json, h5py to locate the bytes to damage).
set -euo pipefail
out=${1:?usage: test_demo.sh OUTDIR}
: "${MPICKPT_DEMO:?}" "${MPICKPT_CLI:?}"
export MPIEXEC=${MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_odls_base_sigkill_timeout=0
ulimit -c 0
rm -rf "$out"
mkdir -p "$out"

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_demo_checks.py" "$out" </dev/null
