#!/usr/bin/env bash
# The command-line tool on checkpoints whose data file lies (issue 12): dataset /tensors/w has
# external storage in /etc/passwd (index CRC set to match its first 64 bytes) or in a FIFO, or is
# an external link or a virtual dataset into a FIFO. dump, verify, inspect and diff must exit 1
# naming the data file, the dataset and what was found, and print no byte of /etc/passwd. A tool
# that opens the FIFO blocks forever: the test's CTest TIMEOUT catches it.
#
#   MPICKPT_CLI=.../mpickpt MPICKPT_HOSTILE=.../test_hostile_h5 test_hostile_cli.sh OUTDIR
set -euo pipefail
out=${1:?usage: test_hostile_cli.sh OUTDIR}
: "${MPICKPT_CLI:?}" "${MPICKPT_HOSTILE:?}"
rm -rf "$out"
mkdir -p "$out"
"$MPICKPT_HOSTILE" --make "$out" ext-passwd ext-fifo elink-fifo vds-fifo

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_hostile_cli_checks.py" "$out" </dev/null
