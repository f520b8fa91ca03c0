#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, builds build/ and runs every
# test, then does the same with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/, and
# compiles a Release build in build-release/ (no tests run there). Warnings are errors in all three.
#   CTEST_ARGS="-L unit"   extra ctest arguments (both variants)
#   MPICKPT_SKIP_ASAN=1    skip the sanitizer variant (local iteration only; CI runs both)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)

"$root/jobs/deps.sh" test || exit 1

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)
status=0
summary=()

run_variant() { # name builddir cmake-args...
  local name=$1 bdir=$2; shift 2
  echo "== [$name] configure + build in ${bdir#$root/}"
  if ! BUILD_DIR=$bdir "$root/jobs/build.sh" "$@"; then
    echo "== [$name] BUILD FAILED"; status=1; summary+=("$name: build failed"); return
  fi
  echo "== [$name] ctest"
  local log=$bdir/ctest.log
  # shellcheck disable=SC2086
  ctest --test-dir "$bdir" --output-on-failure -j "$jobs" ${CTEST_ARGS:-} 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  summary+=("$name: $(grep -E 'tests passed' "$log" | tail -1)")
  [ "$rc" -eq 0 ] || status=1
}

# Warnings are errors in the project's own builds only (MPICKPT_WERROR; a user's build has it off).
run_variant default "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPICKPT_WERROR=ON
if [ "${MPICKPT_SKIP_ASAN:-0}" != 1 ]; then
  run_variant asan "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DMPICKPT_SANITIZE=ON \
    -DMPICKPT_WERROR=ON
fi

# A user's Release build (-O3, where GCC warns of things -O2 does not see) must compile cleanly:
# the libraries, the programs and the Python module, warnings as errors; no tests are built.
echo "== [release] compile check in build-release"
rstart=$(date +%s)
if BUILD_DIR=$root/build-release "$root/jobs/build.sh" -DCMAKE_BUILD_TYPE=Release \
     -DMPICKPT_WERROR=ON -DMPICKPT_BUILD_TESTS=OFF; then
  summary+=("release: compiled without warnings ($(( $(date +%s) - rstart )) s)")
else
  echo "== [release] BUILD FAILED"; status=1; summary+=("release: build failed")
fi

echo "== summary ($(( $(date +%s) - start )) s)"
for s in "${summary[@]}"; do echo "   $s"; done
[ $status -eq 0 ] && echo "== ALL PASSED" || echo "== FAILURES"
exit $status
