#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs consumer programs against it:
# a C program with find_package(mpickpt) and with pkg-config (run without LD_LIBRARY_PATH), a
# C++-only and a Fortran-only CMake project (MPICKPT_HAVE_CXX, MPICKPT_HAVE_FORTRAN: what the build
# has), and the Python package.
set -euo pipefail
work=${1:?usage: install_consumer.sh WORKDIR}
build=${MPICKPT_BINARY_DIR:?}
src=${MPICKPT_SOURCE_DIR:?}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/mpickpt.h include/mpickpt/common.h lib/cmake/mpickpt/mpickptConfig.cmake \
         lib/pkgconfig/mpickpt.pc bin/mpickpt; do
  found=$(ls -d "$prefix"/$f "$prefix"/lib/*/${f#lib/} 2>/dev/null | head -1 || true)
  [ -n "$found" ] || { echo "install is missing $f"; ls -R "$prefix"; exit 1; }
done

# A sanitizer build's libraries need the consumer built with the same runtime.
san=${MPICKPT_SAN_FLAGS:-}

# 1. CMake package, from a C project
cmake -S "$src/tests/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$san" >"$work/configure.log"
cmake --build "$work/cmake-build" >"$work/build.log"
mpirun -np 2 "$work/cmake-build/consumer"

# 2. pkg-config, with no LD_LIBRARY_PATH at build or run time: the .pc file's rpath finds the
# installed libraries
pcdir=$(dirname "$(find "$prefix" -name mpickpt.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
env -u LD_LIBRARY_PATH cc -std=c11 $san -o "$work/consumer-pc" "$src/tests/consumer/consumer.c" \
   $(pkg-config --cflags --libs mpickpt)
readelf -d "$work/consumer-pc" | grep -E 'R(UN)?PATH' ||
  { echo "consumer-pc has no RUNPATH: the .pc file lost its rpath"; exit 1; }
env -u LD_LIBRARY_PATH mpirun -np 2 "$work/consumer-pc"
# The installed CLI runs from the prefix (finds its library through its RPATH).
env -u LD_LIBRARY_PATH "$prefix/bin/mpickpt" --version

# 2b. A C++-only CMake project (no C language: find_package must not need FindMPI's C component;
# no Open MPI C++ bindings to link), saving and restoring on 2 ranks
if [ "${MPICKPT_HAVE_CXX:-ON}" = ON ]; then
  cmake -S "$src/tests/consumer/cxx" -B "$work/cxx-build" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$san" >"$work/configure-cxx.log" ||
    { cat "$work/configure-cxx.log"; exit 1; }
  cmake --build "$work/cxx-build" >"$work/build-cxx.log" || { cat "$work/build-cxx.log"; exit 1; }
  mpirun -np 2 "$work/cxx-build/consumer_cxx" "$work/cxx-ckpt"
fi

# 2c. A Fortran-only CMake project using the installed module (find_package(mpickpt COMPONENTS
# Fortran)), saving and restoring on 2 ranks; the build made the module when it had a compiler
if [ "${MPICKPT_HAVE_FORTRAN:-OFF}" = ON ]; then
  [ -f "$prefix/include/mpickpt.mod" ] || { echo "install is missing include/mpickpt.mod"; exit 1; }
  cmake -S "$src/tests/consumer/fortran" -B "$work/fortran-build" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_Fortran_FLAGS="$san" >"$work/configure-fortran.log" ||
    { cat "$work/configure-fortran.log"; exit 1; }
  cmake --build "$work/fortran-build" >"$work/build-fortran.log" ||
    { cat "$work/build-fortran.log"; exit 1; }
  # libgfortran hands Fortran strings (not NUL-terminated) to strndup with their length: correct,
  # but ASan's strict_string_checks reads to a NUL and reports an overflow; off for Fortran only
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}strict_string_checks=0 \
    mpirun -np 2 -x ASAN_OPTIONS "$work/fortran-build/consumer_fortran" "$work/fortran-ckpt"
fi

# 3. The Python package, when the build made it: installed into the interpreter's site directory
# under the prefix, importable from there alone (its extension finds libmpickpt through its RPATH),
# and usable under mpirun.
if [ -n "${MPICKPT_PYTHON_SITE:-}" ]; then
  site=$prefix/$MPICKPT_PYTHON_SITE
  [ -f "$site/mpickpt/__init__.py" ] && ls "$site"/mpickpt/_mpickpt*.so >/dev/null ||
    { echo "install is missing the Python package in $site"; ls -R "$prefix"; exit 1; }
  if [ -z "$san" ]; then # a sanitizer build's extension needs libasan preloaded (tests do that)
    (cd "$work" && PYTHONPATH=$site mpirun -np 2 /usr/bin/python3 -B \
       "$here/install_consumer_python.py" "$site" "$work")
    echo
  fi
fi
echo "install_consumer: ok"
