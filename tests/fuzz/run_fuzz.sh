#!/usr/bin/env bash
# CTest entry for the index/slice-spec fuzzer (tests/fuzz/fuzz_index.c).
#
#   run_fuzz.sh SRC_DIR BUILD_DIR WORKDIR SECONDS
#
# Builds the fuzzer into WORKDIR with clang (build_fuzzer.sh), makes a seed corpus in WORKDIR/corpus
# from index files written by the project's own writer (BUILD_DIR/tests/test_checkpoint) plus a few
# slice specs, then fuzzes for SECONDS and exits with libFuzzer's status. Crash inputs are written to
# WORKDIR/artifacts/. A missing clang or libFuzzer runtime is a failure, not a skip.
set -euo pipefail

if [ $# -ne 4 ]; then
    echo "usage: $0 SRC_DIR BUILD_DIR WORKDIR SECONDS" >&2
    exit 64
fi
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$3
seconds=$4

# Mode bytes of fuzz_index.c (first input byte).
MODE_CONTAINER=0
MODE_PAYLOAD=1
MODE_WRAPPED=2
MODE_MERGE=3
MODE_SLICE=4
MODE_JSON=5

mkdir -p "$work"
work=$(cd "$work" && pwd)
fuzzer="$work/fuzz_index"

# ---- build ----
if ! bash "$src/tests/fuzz/build_fuzzer.sh" "$src" "$build" "$fuzzer"; then
    echo "run_fuzz.sh: FAIL: could not build the fuzzer (needs clang and libFuzzer's runtime:" \
         "Debian packages clang and libclang-rt-14-dev)" >&2
    exit 1
fi

# ---- seed corpus ----
corpus="$work/corpus"
gen="$work/gen"
rm -rf "$corpus" "$gen" "$work/artifacts"
mkdir -p "$corpus" "$work/artifacts"

writer="$build/tests/test_checkpoint"
if [ ! -x "$writer" ]; then
    echo "run_fuzz.sh: FAIL: $writer not found: build $build first" >&2
    exit 1
fi
if ! MPICKPT_TEST_DIR="$gen" "$writer" >"$work/test_checkpoint.log" 2>&1; then
    tail -n 20 "$work/test_checkpoint.log" >&2
    echo "run_fuzz.sh: FAIL: $writer failed; cannot make seeds" >&2
    exit 1
fi

# byte N: writes one byte of value N (0..255).
byte() { printf '%b' "\\0$(printf '%03o' "$1")"; }

# seed NAME MODE FILE...: writes the mode byte followed by the concatenated FILEs.
seed() {
    local name=$1 mode=$2
    shift 2
    { byte "$mode"; cat "$@"; } >"$corpus/$name"
}

u8() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' '; }

# An Index payload without its header (field 1) parses as a Fragment: tensors and files have the
# same field numbers. protobuf-c writes the header first; handle one-byte lengths only.
strip_header() {
    local f=$1 out=$2 tag len
    tag=$(u8 "$f" 0)
    len=$(u8 "$f" 1)
    if [ "$tag" = 10 ] && [ -n "$len" ] && [ "$len" -lt 128 ]; then
        tail -c +$((len + 3)) "$f" >"$out"
        return 0
    fi
    return 1
}

n=0
frags=()
while IFS= read -r -d '' idx; do
    n=$((n + 1))
    base=$(basename "$idx" .index)
    seed "container-$n-$base" $MODE_CONTAINER "$idx"
    size=$(stat -c %s "$idx")
    if [ "$size" -ge 28 ]; then
        payload="$gen/payload-$n"
        head -c $((size - 4)) "$idx" | tail -c +25 >"$payload"
        seed "payload-$n-$base" $MODE_PAYLOAD "$payload"
        seed "wrapped-$n-$base" $MODE_WRAPPED "$payload"
        if strip_header "$payload" "$gen/frag-$n"; then
            frags+=("$gen/frag-$n")
            # one fragment: count byte 0
            { byte 0; cat "$gen/frag-$n"; } >"$gen/merge1-$n"
            seed "merge1-$n-$base" $MODE_MERGE "$gen/merge1-$n"
        fi
    fi
done < <(find "$gen" -name '*.index' -type f -print0 | sort -z)
if [ "$n" -eq 0 ]; then
    echo "run_fuzz.sh: FAIL: $writer left no *.index file under $gen" >&2
    exit 1
fi
# two fragments: count byte 1, 2-byte LE length of the first, then both
if [ "${#frags[@]}" -ge 2 ]; then
    a=${frags[0]} b=${frags[${#frags[@]} - 1]}
    la=$(stat -c %s "$a")
    {
        byte 1
        byte $((la & 255))
        byte $((la >> 8 & 255))
        cat "$a" "$b"
    } >"$gen/merge2"
    seed merge2 $MODE_MERGE "$gen/merge2"
fi

i=0
for spec in "4 10 0,2:-" "2 3 4 1,1:-:0,4" "4 10 0,2:-"$'\n'"-:3,7" "5 -" "0 3 -:1,2" \
            "9223372036854775807 9223372036854775806,1"; do
    i=$((i + 1))
    printf '%s' "$spec" >"$gen/slice-$i"
    seed "slice-$i" $MODE_SLICE "$gen/slice-$i"
done
# records of plain values as Python's json writes them (versions 1 and 2), and hostile ones
i=0
for doc in '{"mpickpt_json": 1, "per_rank": {"seed": 7}, "replicated": {"lr": 0.001, "n": "caf\u00e9", "x": NaN, "big": 123456789012345678901234567890}}' \
           '{"mpickpt_json": 2, "aliases": {"m/h": {"of": "m/e", "offset": 0, "shape": [4], "strides": [1], "dtype": "float32", "torch": true}}, "tree": ["d", [["m", ["d", [[0, ["T"]], ["h", ["a"]]]]]]]}' \
           '["\ud83d\ude00", "\ud800", -0.0, 1e-400, Infinity, -Infinity, true, false, null, {}]' \
           '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'; do
    i=$((i + 1))
    printf '%s' "$doc" >"$gen/json-$i"
    seed "json-$i" $MODE_JSON "$gen/json-$i"
done
# Inputs that once exposed a bug stay in the corpus as regressions (each starts with its mode byte).
for f in "$src/tests/fuzz/regressions"/*.mode*; do
  [ -f "$f" ] && cp "$f" "$corpus/regression-$(basename "$f")"
done
echo "run_fuzz.sh: $(find "$corpus" -type f | wc -l) seeds from $n index files"

# ---- fuzz ----
log="$work/fuzz.log"
set +e
"$fuzzer" -max_total_time="$seconds" -seed=1 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$corpus" >"$log" 2>&1
status=$?
set -e

runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -n 1)
if [ -z "$runs" ]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
fi
if [ "$status" -ne 0 ]; then
    tail -n 80 "$log"
    echo "run_fuzz.sh: FAIL: fuzzer exited with status $status after ${runs:-?} executions;" \
         "reproducers in $work/artifacts/: $(find "$work/artifacts" -type f -printf '%f ')"
    exit "$status"
fi
grep -E '^(stat::|Done )' "$log" || true
echo "run_fuzz.sh: OK: ${runs:-?} executions in ${secs:-$seconds} s," \
     "corpus now $(find "$corpus" -type f | wc -l) inputs"
exit 0
