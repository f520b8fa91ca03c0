#!/usr/bin/env bash
# Builds the libFuzzer target for the index parser/validator and the slice-spec parser with clang
# (the main build uses gcc, so this is a separate compile of just the HDF5-free sources).
#
#   build_fuzzer.sh SRC_DIR BUILD_DIR OUT_BINARY
#
# BUILD_DIR is a configured and built mpickpt tree: its proto/ holds the generated mpickpt.pb-c.[ch].
# Exit status 2 when clang or libFuzzer's runtime is missing (the message names the packages).
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: $0 SRC_DIR BUILD_DIR OUT_BINARY" >&2
    exit 64
fi
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
out=$3

CC=${FUZZ_CC:-clang}
missing="install the Debian packages clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev)"
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "build_fuzzer.sh: FAIL: '$CC' not found; $missing" >&2
    exit 2
fi
# libFuzzer's runtime ships separately from the compiler on Debian/Ubuntu.
fuzzer_rt=$("$CC" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
if [ "$(uname -m)" = x86_64 ] && [ ! -f "$fuzzer_rt" ]; then
    probe=$(mktemp -d)
    trap 'rm -rf "$probe"' EXIT
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
        >"$probe/p.c"
    if ! "$CC" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1; then
        cat "$probe/log" >&2
        echo "build_fuzzer.sh: FAIL: libFuzzer runtime missing for $CC; $missing" >&2
        exit 2
    fi
fi

pb_c="$build/proto/mpickpt.pb-c.c"
if [ ! -f "$pb_c" ] || [ ! -f "$build/proto/mpickpt.pb-c.h" ]; then
    echo "build_fuzzer.sh: FAIL: $pb_c not found: configure and build $build first" >&2
    exit 1
fi
if ! pkg-config --exists libprotobuf-c; then
    echo "build_fuzzer.sh: FAIL: pkg-config cannot find libprotobuf-c (Debian: libprotobuf-c-dev)" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2046 # pkg-config output is meant to be split into words
"$CC" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra -Wno-unused-parameter \
    -I"$src/include" -I"$src/lib" -I"$build/proto" \
    $(pkg-config --cflags libprotobuf-c) \
    "$src/tests/fuzz/fuzz_index.c" \
    "$src/lib/index.c" "$src/lib/validate.c" "$src/lib/tiling.c" "$src/lib/merge.c" \
    "$src/lib/fragment.c" "$src/lib/utf8.c" "$src/lib/slice.c" "$src/lib/crc32c.c" \
    "$src/lib/dtype.c" "$src/lib/error.c" "$src/lib/fsutil.c" "$src/lib/fileio.c" \
    "$src/lib/arena.c" "$src/lib/json.c" "$src/lib/json_read.c" \
    "$pb_c" \
    $(pkg-config --libs libprotobuf-c) \
    -o "$out"
echo "build_fuzzer.sh: built $out"
