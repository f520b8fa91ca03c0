#!/usr/bin/env bash
# A rank killed while an async (background) write is in flight, end to end with mpirun:
#
#   MPICKPT_TEST_ASYNC=.../test_async MPICKPT_CLI=.../mpickpt MPIEXEC=mpirun \
#     test_async_kill.sh OUTDIR shared|per-rank
#
# For each scenario "N ranks, victim V -> restore on M ranks" (2, 1 -> 3 and 4, 0 -> 2):
# 1. `test_async OUT kill_write LAYOUT V` on N ranks commits ckpt-1 (async save + sync) through
#    the manager, then starts an async save with MPICKPT_FAULT=V:write:kill: rank V dies with
#    SIGKILL inside the writer thread. mpirun must exit non-zero (not by our timeout), after the
#    library's "killing this rank at write" line; ckpt-1 is committed and listed, ckpt-2 is not.
# 2. `test_async OUT kill_restore LAYOUT N` on M ranks: restore_or_initialize restores ckpt-1 with
#    exact values (ranks the writer did not have keep their per-rank state untouched); the next
#    save (ckpt-2) removes the dead job's leftovers; ckpt-2 restores. Exit 0.
# 3. Afterwards `mpickpt gc --dry-run` finds nothing to remove and `mpickpt verify` passes.
set -uo pipefail
out=${1:?usage: test_async_kill.sh OUTDIR shared|per-rank}
layout=${2:?usage: test_async_kill.sh OUTDIR shared|per-rank}
: "${MPICKPT_TEST_ASYNC:?}" "${MPICKPT_CLI:?}"
MPIEXEC=${MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_odls_base_sigkill_timeout=0
unset MPICKPT_FAULT MPICKPT_ASYNC MPICKPT_LAYOUT
ulimit -c 0
rm -rf "$out"
mkdir -p "$out"

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

no_sanitizer_report() { # LOG WHAT
    if grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:' "$1"; then
        fail "$2: sanitizer report in $1"
        grep -A20 -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error:' "$1" |
            head -60 >&2
    fi
}

scenario() { # N VICTIM M
    local n=$1 victim=$2 m=$3
    local dir=$out/n${n}_v${victim}_m${m}
    local ck=$dir/kill
    mkdir -p "$dir"
    echo "== $layout: $n ranks, rank $victim killed in the writer thread, restore on $m ranks"

    local log1=$dir/kill_write.log ended=$dir/kill_write.ended
    local t0=$SECONDS
    # The hang guard: timeout kills the job after 90 s. Whether it did is told by the marker the
    # inner shell writes only when mpirun returned on its own (not by how long it took: a loaded
    # machine may take long without hanging, and timeout's own exit status can equal mpirun's).
    rm -f "$ended"
    timeout -k 5 90 bash -c '"$@"; echo $? >"$0"' "$ended" \
        "$MPIEXEC" -np "$n" "$MPICKPT_TEST_ASYNC" "$dir" kill_write "$layout" "$victim" \
        >"$log1" 2>&1
    local rc=$?
    [ -s "$ended" ] && rc=$(cat "$ended")
    echo "   kill_write: mpirun exit $rc after $((SECONDS - t0)) s"
    if [ ! -s "$ended" ]; then
        fail "kill_write ($n ranks, victim $victim): the job hung after the kill (killed by timeout)"
    elif [ "$rc" -eq 0 ]; then
        fail "kill_write ($n ranks, victim $victim): mpirun exited 0, the job must die"
    fi
    grep -q "kill_write: committed .*/ckpt-1" "$log1" ||
        fail "kill_write ($n ranks): ckpt-1 was not committed first"
    grep -qF "rank $victim] MPICKPT_FAULT: killing this rank at write" "$log1" ||
        fail "kill_write ($n ranks): rank $victim was not killed by MPICKPT_FAULT at write"
    if grep -q "was not killed" "$log1"; then
        fail "kill_write ($n ranks): the job survived the kill"
    fi
    no_sanitizer_report "$log1" kill_write
    [ -f "$ck/ckpt-1.index" ] || fail "ckpt-1.index is missing after the crash"
    [ -f "$ck/ckpt-2.index" ] && fail "ckpt-2.index exists: the save during which rank $victim died committed"
    echo "   left by the dead job:"
    (cd "$ck" && find . -mindepth 1 | sort | sed 's/^/     /')
    "$MPICKPT_CLI" gc --dry-run "$ck" >"$dir/gc_before.txt" 2>&1
    sed 's/^/     /' "$dir/gc_before.txt"
    if "$MPICKPT_CLI" list "$ck" >"$dir/list_before.txt" 2>&1; then
        grep -q 'ckpt-1' "$dir/list_before.txt" || fail "mpickpt list does not show ckpt-1"
        grep -q 'ckpt-2' "$dir/list_before.txt" && fail "mpickpt list shows ckpt-2"
    else
        fail "mpickpt list $ck failed: $(cat "$dir/list_before.txt")"
    fi

    local log2=$dir/kill_restore.log
    timeout -k 5 90 "$MPIEXEC" -np "$m" "$MPICKPT_TEST_ASYNC" "$dir" kill_restore "$layout" "$n" \
        >"$log2" 2>&1
    rc=$?
    echo "   kill_restore: mpirun exit $rc"
    sed -n 's/^\(kill_restore: .*\|test_async .*\)/     \1/p' "$log2"
    if [ "$rc" -ne 0 ]; then
        fail "kill_restore on $m ranks exited $rc"
        tail -40 "$log2" >&2
    fi
    grep -q "kill_restore: restored .*/ckpt-1 " "$log2" || fail "kill_restore did not restore ckpt-1"
    grep -q "kill_restore: saved and restored .*/ckpt-2" "$log2" ||
        fail "kill_restore did not save and restore ckpt-2"
    no_sanitizer_report "$log2" kill_restore

    "$MPICKPT_CLI" gc --dry-run "$ck" >"$dir/gc_after.txt" 2>&1 || fail "mpickpt gc --dry-run failed"
    if grep -q "^would remove" "$dir/gc_after.txt"; then
        fail "leftovers after the next save: $(grep '^would remove' "$dir/gc_after.txt")"
    fi
    "$MPICKPT_CLI" verify "$ck" >"$dir/verify.txt" 2>&1 ||
        fail "mpickpt verify $ck: $(cat "$dir/verify.txt")"
}

scenario 2 1 3
scenario 4 0 2

if [ "$failures" -ne 0 ]; then
    echo "== async kill ($layout): $failures failure(s)"
    exit 1
fi
echo "== async kill ($layout) passed"
