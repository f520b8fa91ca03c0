#!/usr/bin/env bash
# End-to-end test of the directory commands of the mpickpt tool: list (state file, scan fallback,
# DIR/chief, damaged state file), gc (debris of failed saves; committed checkpoints kept) and
# diff (tensor sets, dtypes, shapes, values, headers; exit codes).
#
#   MPICKPT_CLI=.../mpickpt MPICKPT_MAKE_CKPT=.../make_ckpt MPICKPT_MAKE_STATE=.../make_state \
#   MPICKPT_MAKE_DIFF_CKPT=.../make_diff_ckpt test_cli_manage.sh OUTDIR
#
# The checks run in Debian's /usr/bin/python3 (json, h5py), not whatever python3 comes first on
# PATH. h5py only locates raw bytes to corrupt.
set -euo pipefail
out=${1:?usage: test_cli_manage.sh OUTDIR}
: "${MPICKPT_CLI:?}" "${MPICKPT_MAKE_CKPT:?}" "${MPICKPT_MAKE_STATE:?}"
: "${MPICKPT_MAKE_DIFF_CKPT:?}"
rm -rf "$out"
mkdir -p "$out"

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_cli_manage_checks.py" "$out" </dev/null
