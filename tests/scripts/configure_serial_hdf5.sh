#!/usr/bin/env bash
# Configure must refuse a serial-only HDF5 and name the package to install. A serial HDF5 is
# simulated with a compiler wrapper that reports "Parallel HDF5: no" for the installed library.
set -euo pipefail
work=${1:?usage: configure_serial_hdf5.sh WORKDIR}
src=${MPICKPT_SOURCE_DIR:?}
rm -rf "$work"; mkdir -p "$work"
real=$(command -v h5pcc.openmpi || command -v h5pcc)
cat >"$work/h5cc-serial" <<WRAP
#!/usr/bin/env bash
"$real" "\$@" | sed 's/Parallel HDF5: yes/Parallel HDF5: no/'
WRAP
chmod +x "$work/h5cc-serial"
set +e
cmake -S "$src" -B "$work/build" -DMPICKPT_BUILD_TESTS=OFF \
      -DHDF5_C_COMPILER_EXECUTABLE="$work/h5cc-serial" >"$work/configure.log" 2>&1
rc=$?
set -e
cat "$work/configure.log" | grep -A3 "mpickpt:" || true
[ $rc -ne 0 ] || { echo "FAIL: configure accepted a serial HDF5"; exit 1; }
grep -q "serial build" "$work/configure.log" || { echo "FAIL: no 'serial build' message"; exit 1; }
grep -q "libhdf5-openmpi-dev" "$work/configure.log" || { echo "FAIL: message does not name libhdf5-openmpi-dev"; exit 1; }
echo "configure_serial_hdf5: refused with a clear message"
