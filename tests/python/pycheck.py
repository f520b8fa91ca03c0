"""Helpers of the Python package's tests (tests/python/test_*.py, run under mpirun by
ckpt_add_python_test): assertions that stop the whole job at once, bit-for-bit comparisons of
NumPy arrays and PyTorch tensors (NaN payloads and -0.0 included), and checks that an error is the
same class with the same message on every rank.

Importing it imports mpi4py.MPI: the tests that must run without MPI (test_open_nompi.py) do not."""
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

import mpickpt

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
SKIP = 77  # SKIP_RETURN_CODE of the python tests


def _abort(kind, value, tb):
    # A failure on one rank must not leave the others waiting in a collective until the CTest
    # TIMEOUT: print it and take the job down.
    sys.stderr.write(f"[rank {rank}/{size}] FAILED:\n" +
                     "".join(traceback.format_exception(kind, value, tb)))
    sys.stderr.flush()
    comm.Abort(1)


sys.excepthook = _abort


def need_torch():
    """PyTorch, or every rank exits with the skip code (77), saying why."""
    why = None
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any failure to import is a reason to skip
        why = f"{type(e).__name__}: {e}"
    whys = comm.allgather(why)
    if any(whys):
        say(f"SKIPPED: PyTorch is not usable here: {[w for w in whys if w][0]}")
        sys.exit(SKIP)
    return torch


def say(*args):
    """Prints on rank 0."""
    if rank == 0:
        print(*args, flush=True)


def check(cond, what):
    """A local assertion (no collective): a failure aborts the job with `what`."""
    if not cond:
        raise AssertionError(f"rank {rank}: {what}")


def is_tensor(x):
    return type(x).__module__.startswith("torch")


def raw(x):
    """(dtype name, shape, bytes) of an array or tensor: equal exactly when the values are bit for
    bit the same (NaN payloads, -0.0, bfloat16 bits)."""
    if is_tensor(x):
        import torch

        t = x.detach().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return name, tuple(x.shape), t.numpy().tobytes()
    a = np.asarray(x)
    return str(a.dtype), a.shape, np.ascontiguousarray(a).tobytes()


def check_bits(got, want, what):
    g, w = raw(got), raw(want)
    check(g[:2] == w[:2], f"{what}: dtype/shape {g[:2]}, expected {w[:2]}")
    if g[2] != w[2]:
        gb = np.frombuffer(g[2], np.uint8)
        wb = np.frombuffer(w[2], np.uint8)
        first = int(np.flatnonzero(gb != wb)[0])
        check(False, f"{what}: bytes differ (first at byte {first} of {len(wb)})")


def same_everywhere(value, what):
    """Collective: `value` (picklable) is equal on every rank; returns rank 0's."""
    values = comm.allgather(value)
    check(all(v == values[0] for v in values), f"{what} differs across ranks: {values}")
    return values[0]


def expect_error(cls, fn, *needles):
    """Collective: fn() raises exactly `cls` on every rank, with the same message everywhere,
    which contains each of `needles`. Returns the exception."""
    err = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any exception is compared below
        err = e
    got = None if err is None else (type(err).__module__ + "." + type(err).__qualname__, str(err))
    everyone = comm.allgather(got)
    check(all(g == everyone[0] for g in everyone),
          f"errors differ across ranks (expected {cls.__name__}): {everyone}")
    if err is None:
        check(False, f"no error, expected {cls.__name__} with {needles}")
    if type(err) is not cls:
        traceback.print_exception(err)
        check(False, f"{type(err).__name__}({err}), expected {cls.__name__}")
    check(isinstance(err, mpickpt.Error) == issubclass(cls, mpickpt.Error), "hierarchy")
    for n in needles:
        check(n in str(err), f"{cls.__name__} message {str(err)!r} does not name {n!r}")
    return err


def outdir(sub=""):
    """The test's output directory (argv[1]) joined with `sub`."""
    return os.path.join(sys.argv[1], sub) if sub else sys.argv[1]


def data_offset(path, dataset):
    """File offset of the first byte of a contiguous HDF5 dataset's data (h5py's get_offset)."""
    import h5py

    with h5py.File(path, "r") as f:
        off = f[dataset].id.get_offset()
    check(off is not None, f"{path}:{dataset} has no contiguous data")
    return off


def datasets(path):
    """Every dataset path in an HDF5 file."""
    import h5py

    out = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.append("/" + n) if isinstance(o, h5py.Dataset) else None)
    return out


# ---- a small sharded state, and the CLI between two jobs (test_pin, test_restorable, test_lock) --

def shard_state(n=1000):
    """A state of `n` elements of a sharded float64 array per rank, a replicated float32 array and
    a plain value."""
    return {"w": mpickpt.Shard(np.zeros(n, np.float64), (n * size,), (n * rank,)),
            "b": np.zeros(7, np.float32), "step": 0}


def shard_fill(state, step):
    """The values of `step` into a shard_state()."""
    state["w"].local[:] = np.arange(len(state["w"].local)) * step + rank * 0.5
    state["b"][:] = step / 10
    state["step"] = step


def shard_expect(state, step, what):
    """Every value of a shard_state() is the one of `step`, bit for bit."""
    want = shard_state(len(state["w"].local))
    shard_fill(want, step)
    check_bits(state["w"].local, want["w"].local, f"{what}: w")
    check_bits(state["b"], want["b"], f"{what}: b")
    check(state["step"] == step, f"{what}: step {state['step']}")


def run_cli(*args):
    """Rank 0 runs `$MPICKPT_CLI ARGS` (an operator between two jobs), which must exit 0; every
    rank waits for it and gets its standard output."""
    import subprocess
    comm.Barrier()
    out = None
    if rank == 0:
        p = subprocess.run([os.environ["MPICKPT_CLI"], *args], capture_output=True, text=True)
        check(p.returncode == 0, f"mpickpt {args}: exit {p.returncode}: {p.stderr}")
        out = p.stdout
    return comm.bcast(out)

