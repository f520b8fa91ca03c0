#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds, and runs the demo on 4 ranks.
#
# Until the training demo (mpickpt-demo) exists, this runs the harness smoke program: 4 ranks write
# one dataset collectively with parallel HDF5 and every rank reads all of it back and checks it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/jobs/deps.sh" build
echo "== building (build/)"
"$root/jobs/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
out=${DEMO_DIR:-$root/build/demo}
rm -rf "$out"
echo "== mpirun -np 4: collective parallel-HDF5 write + full read-back on every rank"
mpirun -np 4 "$root/build/tests/smoke_phdf5" "$out" 4096 64
echo "== wrote $(du -h "$out/smoke.h5" | cut -f1) to $out/smoke.h5:"
h5ls -r "$out/smoke.h5"
