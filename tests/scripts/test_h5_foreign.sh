#!/usr/bin/env bash
# Reads a checkpoint's data file with readers that are not ours: h5py (Debian's /usr/bin/python3)
# finds every tensor through the paths `mpickpt inspect --json` reports and must see the same
# dtype, shape and values as `mpickpt dump --json`; h5dump -H must parse the file and list every
# dataset.
#
#   MPICKPT_CLI=.../mpickpt MPICKPT_MAKE_CKPT=.../make_ckpt test_h5_foreign.sh OUTDIR
#   MPICKPT_CLI=.../mpickpt test_h5_foreign.sh --packed PREFIX
# The second form reads an existing checkpoint written by the saver, which must hold both packed
# pieces (byte ranges of a uint8 dataset under /packs/, format 2) and unpacked ones.
set -euo pipefail
if [ "${1:-}" = --packed ]; then
    : "${MPICKPT_CLI:?}"
    prefix=${2:?usage: test_h5_foreign.sh --packed PREFIX}
    want_packed=1
else
    out=${1:?usage: test_h5_foreign.sh OUTDIR}
    : "${MPICKPT_CLI:?}" "${MPICKPT_MAKE_CKPT:?}"
    rm -rf "$out"
    mkdir -p "$out"
    "$MPICKPT_MAKE_CKPT" "$out/ckpt-1" --counter 1
    prefix=$out/ckpt-1
    want_packed=0
fi

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_h5_foreign_checks.py" "$prefix" "$want_packed" </dev/null
