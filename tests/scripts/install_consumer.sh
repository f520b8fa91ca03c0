#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a consumer program against it
# twice: once with find_package(mpickpt) and once with pkg-config.
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

# 1. CMake package
cmake -S "$src/tests/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$san" >"$work/configure.log"
cmake --build "$work/cmake-build" >"$work/build.log"
mpirun -np 2 "$work/cmake-build/consumer"

# 2. pkg-config
pcdir=$(dirname "$(find "$prefix" -name mpickpt.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cc -std=c11 $san -o "$work/consumer-pc" "$src/tests/consumer/consumer.c" \
   $(pkg-config --cflags --libs mpickpt) -Wl,-rpath,"$(pkg-config --variable=libdir mpickpt)"
mpirun -np 2 "$work/consumer-pc"
# The installed CLI runs from the prefix (finds its library through its RPATH).
"$prefix/bin/mpickpt" --version

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
