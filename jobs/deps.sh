#!/usr/bin/env bash
# Installs the Debian packages mpickpt needs, only those that are missing.
#
#   jobs/deps.sh [build|python|test|slurm|all]    (default: build)
#     build  what building and running the library, CLI, demo and Python package needs
#     python build + PyTorch (jobs/demo-python.sh, jobs/train_torch.py)
#     test   build + what the test suite needs (h5py to read files with a foreign HDF5 reader,
#            clang's libFuzzer, fio for benchmarks baselines) + slurm
#     slurm  build + a single-node Slurm with munge (jobs/slurm/local-slurm.sh, the `slurm` tests)
#
# Does nothing when everything is present. On a machine without apt-get it prints the packages
# to install and exits 1. Runs apt non-interactively; needs root (or sudo) only when installing.
set -euo pipefail

BUILD_PKGS=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools protobuf-c-compiler
            libprotobuf-c-dev libsnappy-dev cmake pkg-config gcc make
            # the Fortran module (mpi/fortran) and the C++ and Fortran consumer tests
            g++ gfortran
            # the Python package (mpi/python): the interpreter's headers, NumPy, mpi4py
            python3 python3-dev python3-numpy python3-mpi4py)
# PyTorch (CPU) for the Python examples, jobs/train_torch.py and the python tests
PYTHON_PKGS=(python3-torch)
TEST_PKGS=(python3-h5py clang libclang-rt-14-dev fio "${PYTHON_PKGS[@]}")
# gdb: the stacks of crashed ranks' cores in the cluster Slurm test (tests/cluster/)
SLURM_PKGS=(slurmctld slurmd slurm-client munge gdb)

what=${1:-build}
case "$what" in
  build) pkgs=("${BUILD_PKGS[@]}") ;;
  python) pkgs=("${BUILD_PKGS[@]}" "${PYTHON_PKGS[@]}") ;;
  slurm) pkgs=("${BUILD_PKGS[@]}" "${SLURM_PKGS[@]}") ;;
  test|all) pkgs=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${SLURM_PKGS[@]}") ;;
  *) echo "usage: $0 [build|python|test|slurm|all]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "mpickpt: this machine has no apt-get/dpkg; install these (Debian 12 package names) yourself:" >&2
  echo "  ${pkgs[*]}" >&2
  echo "  (elsewhere: Open MPI 4.x, parallel HDF5 1.10+ built with MPI, protobuf-c 1.4 + protoc-c, CMake >= 3.18)" >&2
  exit 1
fi

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "mpickpt: missing packages and not root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "mpickpt: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "mpickpt: installed ${#missing[@]} package(s)"
