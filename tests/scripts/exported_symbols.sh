#!/usr/bin/env bash
# exported_symbols: every shared object the build installs exports only the public API
# (docs/building.md, "What the libraries export").
#   exported_symbols.sh LIB...
# For each LIB, `nm -D --defined-only` must list only names that start with `ckpt_` but not
# `ckpt__` (the internal functions), and besides those only:
#   - PyInit__mpickpt, the entry of the Python extension module (_mpickpt*.so);
#   - __mpickpt_MOD_*, the procedures and data of the Fortran module (libmpickpt_fortran.so);
#   - the linker's own _init, _fini, _edata, _end, __bss_start (some toolchains export them).
# Every other name is listed and the test fails.
set -u
if [ $# -eq 0 ]; then
  echo "usage: exported_symbols.sh LIB..." >&2
  exit 2
fi
status=0
for lib in "$@"; do
  if [ ! -f "$lib" ]; then
    echo "$lib: missing" >&2
    status=1
    continue
  fi
  syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }') || {
    echo "$lib: nm failed" >&2
    status=1
    continue
  }
  pattern='^ckpt_[^_]'
  case $(basename "$lib") in
  _mpickpt*.so) pattern='^PyInit__mpickpt$' ;;
  libmpickpt_fortran.so*) pattern='^(ckpt_[^_]|__mpickpt_MOD_)' ;;
  esac
  bad=$(printf '%s\n' "$syms" | grep -Ev "$pattern" | grep -Ev '^(_init|_fini|_edata|_end|__bss_start)$' | sed '/^$/d')
  n=$(printf '%s\n' "$syms" | sed '/^$/d' | wc -l)
  if [ -n "$bad" ]; then
    nbad=$(printf '%s\n' "$bad" | wc -l)
    echo "FAIL $(basename "$lib"): $nbad of $n exported symbols are not public API:"
    printf '%s\n' "$bad" | sed 's/^/  /'
    status=1
  else
    echo "ok   $(basename "$lib"): $n exported symbols, all public API"
  fi
done
exit $status
