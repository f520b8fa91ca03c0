#!/usr/bin/env bash
# End-to-end test of the mpickpt command-line tool: inspect/dump output against the values
# make_ckpt wrote (recomputed here), exit codes, and verify on corrupted copies.
#
#   MPICKPT_CLI=.../mpickpt MPICKPT_MAKE_CKPT=.../make_ckpt test_cli.sh OUTDIR
#
# The checks run in Debian's /usr/bin/python3 (json, numpy, h5py), not whatever python3 comes
# first on PATH. h5py only locates raw bytes to corrupt.
set -euo pipefail
out=${1:?usage: test_cli.sh OUTDIR}
: "${MPICKPT_CLI:?}" "${MPICKPT_MAKE_CKPT:?}"
rm -rf "$out"
mkdir -p "$out/good"
# The commit time must lie between these two readings of the same clock (CLOCK_REALTIME).
export MPICKPT_TEST_T0=$(date +%s.%N)
"$MPICKPT_MAKE_CKPT" "$out/good/ckpt-7" --counter 7 --epoch 3 --step 1234
export MPICKPT_TEST_T1=$(date +%s.%N)

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_cli_checks.py" "$out" </dev/null
