#!/usr/bin/env bash
# Configures and builds mpickpt into build/ (binaries in build/bin/). Extra arguments go to cmake.
#   BUILD_DIR=...  another build directory (default: build)
# Logs: <build dir>/configure.log and build.log; shown when a step fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bdir=${BUILD_DIR:-$root/build}
mkdir -p "$bdir"
cmake -S "$root" -B "$bdir" "$@" >"$bdir/configure.log" 2>&1 || {
  cat "$bdir/configure.log" >&2; echo "mpickpt: configure failed (log: $bdir/configure.log)" >&2; exit 1; }
cmake --build "$bdir" -j "$(nproc)" >"$bdir/build.log" 2>&1 || {
  grep -E -B2 -A6 'error|Error' "$bdir/build.log" | head -80 >&2
  echo "mpickpt: build failed (log: $bdir/build.log)" >&2; exit 1; }
