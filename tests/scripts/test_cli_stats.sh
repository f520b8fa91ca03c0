#!/usr/bin/env bash
# Test of `mpickpt stats`: a handwritten metrics.jsonl (valid lines, malformed lines that must be
# reported with their line number and skipped, a blank and a CRLF line), DIR/chief fallback, the
# file itself as operand, exit codes (no file, no valid line, usage); then end to end on the
# metrics.jsonl that a real save writes (mpirun -np 2 example_api DIR).
#
#   MPICKPT_CLI=.../mpickpt MPICKPT_EXAMPLE_API=.../example_api MPIEXEC=.../mpirun \
#   test_cli_stats.sh OUTDIR
#
# The checks run in Debian's /usr/bin/python3, not whatever python3 comes first on PATH. The MPI
# environment (root, oversubscription, sanitizer options) comes from ctest (MPICKPT_TEST_ENV).
set -euo pipefail
out=${1:?usage: test_cli_stats.sh OUTDIR}
: "${MPICKPT_CLI:?}" "${MPICKPT_EXAMPLE_API:?}" "${MPIEXEC:?}"
rm -rf "$out"
mkdir -p "$out"

# The checks (-B: no __pycache__ in the source tree; stdin at EOF, as it was for the heredoc
# they came from: mpirun hands stdin on to rank 0).
here=$(dirname "${BASH_SOURCE[0]}")
exec /usr/bin/python3 -B "$here/test_cli_stats_checks.py" "$out" </dev/null
