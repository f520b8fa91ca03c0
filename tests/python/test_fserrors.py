"""File-system errors are OSErrors (issue 30): a save into a read-only file system raises
mpickpt.PermissionDeniedError (an mpickpt.FileSystemError, an mpickpt.Error, a builtins
PermissionError and OSError) with errno EROFS on every rank, the same message everywhere, the rank
prefix once; a save onto a full file system raises mpickpt.NoSpaceError (an OSError) with errno
ENOSPC on every rank; mpickpt.export() into a read-only directory the same PermissionDeniedError;
an OSError raised by Python code on one rank inside a collective step reaches every rank as the
matching mpickpt class with its errno.

Rank 0 mounts two small tmpfs under OUTDIR (root only: otherwise every rank skips, 77), one
remounted read-only; both are unmounted at exit, whatever happens.

Usage: mpirun -np N python3 test_fserrors.py OUTDIR"""
import atexit
import errno
import os
import re
import subprocess
import sys

import numpy as np

import pycheck as pc
from pycheck import check, comm, rank, say, size

import mpickpt
from mpickpt import _state  # the package's collective error path, driven directly

ro = pc.outdir("ro")
full = pc.outdir("full")
mounted = []


def unmount():
    for m in reversed(mounted):
        subprocess.run(["umount", m], capture_output=True)
        if os.path.ismount(m):
            subprocess.run(["umount", "-l", m], capture_output=True)
    mounted.clear()


atexit.register(unmount)

why = None
if rank == 0:
    try:
        for d in (ro, full):
            os.makedirs(d, exist_ok=True)
            if os.path.ismount(d):
                subprocess.run(["umount", "-l", d], capture_output=True)
        script = (f'mount -t tmpfs -o size=4m tmpfs "{ro}" && mkdir "{ro}/ck" && '
                  f'mount -o remount,ro "{ro}"')
        p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
        if p.returncode == 0:
            mounted.append(ro)
            p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full],
                               capture_output=True, text=True)
            if p.returncode == 0:
                mounted.append(full)
        if p.returncode != 0:
            why = f"cannot mount a tmpfs here (root only): {p.stderr.strip()}"
        elif os.access(ro, os.W_OK) and os.path.exists(os.path.join(ro, "probe")):
            why = "the read-only tmpfs is writable"
    except OSError as e:
        why = str(e)
why = comm.bcast(why)
if why:
    say(f"SKIPPED: {why}")
    unmount()
    sys.exit(pc.SKIP)

REPEAT = re.compile(r"rank \d+(?: \(host [^)]*\))?: (?:rank \d+|mpickpt: )|mpickpt: mpickpt:")


def expect_os_error(cls, want_errno, fn, what, *needles):
    """fn() raises exactly cls on every rank, an OSError and an mpickpt.Error with errno
    want_errno, the same message everywhere, naming the rank once."""
    err = pc.expect_error(cls, fn, *needles)
    check(isinstance(err, OSError) and isinstance(err, mpickpt.Error),
          f"{what}: {type(err).__mro__} is not both OSError and mpickpt.Error")
    check(err.errno == want_errno,
          f"{what}: errno {err.errno}, expected {want_errno} ({errno.errorcode[want_errno]})")
    check(not REPEAT.search(str(err)), f"{what}: a repeated prefix in {str(err)!r}")
    got = comm.allgather(err.errno)
    check(all(g == want_errno for g in got), f"{what}: errno per rank {got}")
    return err


# a save into a read-only file system
state = {"w": mpickpt.Shard(np.arange(1000, dtype=np.float64), (1000 * size,), (1000 * rank,)),
         "b": np.ones(5, np.float32), "step": 3}


def save_ro():
    mgr = mpickpt.CheckpointManager(os.path.join(ro, "ck"))
    try:
        mgr.save(1, state)
    finally:
        mgr.close()


err = expect_os_error(mpickpt.PermissionDeniedError, errno.EROFS, save_ro, "read-only save",
                      "Read-only file system")
check(isinstance(err, PermissionError) and isinstance(err, mpickpt.FileSystemError),
      "PermissionDeniedError is a PermissionError and a FileSystemError")
check(err.code == mpickpt.FileSystemError.code, "code of PermissionDeniedError")
say(f"read-only save: {type(err).__name__} errno {err.errno}: {err}")

# a save onto a full file system (4 MB per rank onto 256 KiB)
big = {"w": mpickpt.Shard(np.ones(1 << 19, np.float64), ((1 << 19) * size,), ((1 << 19) * rank,))}


def save_full():
    mgr = mpickpt.CheckpointManager(os.path.join(full, "ck"))
    try:
        mgr.save(1, big)
    finally:
        mgr.close()


err = expect_os_error(mpickpt.NoSpaceError, errno.ENOSPC, save_full, "full disk")
say(f"full disk: {type(err).__name__} errno {err.errno}: {err}")

# export (local, no MPI) into a read-only directory
src = pc.outdir("src")
mgr = mpickpt.CheckpointManager(src)
mgr.save(1, state)
mgr.close()
comm.Barrier()
try:
    mpickpt.export(os.path.join(src, "ckpt-1"), os.path.join(ro, f"out{rank}.safetensors"))
    check(False, "export into a read-only directory succeeded")
except mpickpt.PermissionDeniedError as e:
    check(e.errno == errno.EROFS and isinstance(e, OSError), f"export: errno {e.errno}")
    check(not REPEAT.search(str(e)), f"export: a repeated prefix in {str(e)!r}")

# an OSError from Python code on the last rank, agreed by a collective step
for code, cls in ((errno.EACCES, mpickpt.PermissionDeniedError),
                  (errno.ENOSPC, mpickpt.NoSpaceError), (errno.EIO, mpickpt.FileSystemError)):
    def local(code=code):
        if rank == size - 1:
            raise OSError(code, os.strerror(code), "/some/file")
    err = expect_os_error(cls, code, lambda: _state.collective(comm, local),
                          f"agreed {errno.errorcode[code]}", f"rank {size - 1}: ")
    check(str(err).count(f"rank {size - 1}") == 1, f"rank named once: {err}")

comm.Barrier()
unmount()
say("OK")
