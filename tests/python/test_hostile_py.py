"""Hostile records and shapes met by the Python package (issue 29); every check on every rank.

  records  a checkpoint whose record of plain values (rank 0's, and every rank's) is nested
           200,000 deep, is not a JSON object (a string, an array), has a "replicated" that is a
           string, or holds an object where a plain value belongs: restore_or_initialize() and
           mpickpt.open(...).json raise CorruptError naming the checkpoint and the record, the
           same on every rank; the state keeps its values. It was a generic Error "maximum
           recursion depth exceeded", or an InvalidArgumentError "string indices must be integers".
  shape    a tensor of shape [0, 2**62, 2**62] (no element; the C library stores it):
           mpickpt.open(...)[name].read() raises InvalidArgumentError naming the tensor (it was
           NumPy's ValueError "array is too big"); a part of it reads.
  prefix   a restore that fails on the last rank (a dtype that differs there) raises the C
           library's agreed error with its "rank R (host H): " prefix once (it read "rank 0 (host
           vm): rank 0 (host vm): rank 0: ..."); an error of the Python layer's own agreement
           (a damaged record) carries one rank prefix too.

Usage: mpirun -np N python3 test_hostile_py.py OUTDIR"""
import os
import re
import shutil

import numpy as np

import pycheck as pc
from pycheck import check, comm, expect_error, rank, size

import mpickpt
from mpickpt._tree import JSON_BLOB

LAST = size - 1
PREFIX_RE = re.compile(r"rank \d+(?: \(host [^)]*\))?: ")


def fresh(name):
    d = pc.outdir(name)
    if rank == 0:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    comm.Barrier()
    return d


class Proxy:
    """Forwards to `inner`, except the methods given."""

    def __init__(self, inner, **methods):
        self._inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def state():
    return {"w": np.arange(4.0), "k": 7, "mine": mpickpt.PerRank(rank)}


# ---- records ----
DEEP = 200_000
records = {
    "deep": b'{"mpickpt_json": 1, "per_rank": {}, "replicated": {"k": ' + b"[" * DEEP +
            b"]" * DEEP + b"}}",
    "deep_bare": b"[" * DEEP + b"]" * DEEP,
    "string": b'"replicated"',
    "array": b'[{"replicated": {}, "per_rank": {}}]',
    "replicated_string": b'{"mpickpt_json": 1, "per_rank": {}, "replicated": "k"}',
    "object_value": b'{"mpickpt_json": 1, "per_rank": {"mine": 0}, "replicated": {"k": {"a": 1}}}',
    "not_json": b'{"mpickpt_json": 1, "replicated": {"k": 7,',
}
for case, bad in records.items():
    pc.say(f"records: {case}")
    d = fresh(f"records_{case}")
    mgr = mpickpt.CheckpointManager(d)
    real = mgr._saver

    def set_blob(name, data, real=real, bad=bad):
        real.set_blob(name, bad if name == JSON_BLOB else data)

    mgr._saver = Proxy(real, set_blob=set_blob)
    path = mgr.save(1, state())
    mgr._saver = real
    prefix = os.path.join(d, "ckpt-1")
    check(os.path.basename(path) == "ckpt-1", f"records {case}: saved {path}")
    st = state()
    st["k"] = 99
    err = expect_error(mpickpt.CorruptError, lambda: mgr.restore_or_initialize(st), prefix,
                       f"'{JSON_BLOB}/rank_0'")
    check(len(PREFIX_RE.findall(str(err))) == 1 and PREFIX_RE.match(str(err)),
          f"records {case}: not one rank prefix first: {err}")
    check(st["k"] == 99 and st["mine"].value == rank, f"records {case}: the state changed: {st}")
    mgr.close()
    with mpickpt.open(prefix) as ck:
        expect_error(mpickpt.CorruptError, lambda: ck.json, prefix, f"'{JSON_BLOB}/rank_0'")
        expect_error(mpickpt.CorruptError, lambda: ck.json_of_rank(0), prefix,
                     f"'{JSON_BLOB}/rank_0'")
        pc.check_bits(ck["w"].read(), np.arange(4.0), f"records {case}: the arrays still read")
    if case == "deep":
        check(f"nested more than {mpickpt._state.MAX_JSON_DEPTH} deep" in str(err),
              f"records deep: {err}")

# a record as the writer makes it still restores (the checks refuse nothing valid)
d = fresh("records_valid")
with mpickpt.CheckpointManager(d) as mgr:
    mgr.save(1, state())
    st = state()
    st["k"], st["mine"] = 0, mpickpt.PerRank(-1)
    info = mgr.restore_or_initialize(st)
    check(info and st["k"] == 7 and st["mine"].value == rank, f"records valid: {info} {st}")

# ---- shape: no NumPy array has it ----
pc.say("shape: [0, 2**62, 2**62]")
d = fresh("shape")
huge = (0, 2 ** 62, 2 ** 62)
with mpickpt.CheckpointManager(d) as mgr:
    mgr.save(1, {"z": mpickpt.Shard(np.empty((0, 1, 1)), huge, (0, rank, 0)), "w": np.ones(3)})
with mpickpt.open(os.path.join(d, "ckpt-1")) as ck:
    z = ck["z"]
    check(z.shape == huge, f"shape: {z.shape}")
    expect_error(mpickpt.InvalidArgumentError, z.read, "tensor 'z'", str(2 ** 62))
    expect_error(mpickpt.InvalidArgumentError, lambda: np.asarray(z), "tensor 'z'")
    expect_error(mpickpt.InvalidArgumentError, lambda: z[:, 1:], "tensor 'z'")
    part = z[:, :2, :3]
    check(part.shape == (0, 2, 3) and part.dtype == np.float64, f"shape: a part {part.shape}")
    pc.check_bits(ck["w"].read(), np.ones(3), "shape: the other tensor reads")

# ---- prefix: once ----
pc.say("prefix: a restore that fails on the last rank")
d = fresh("prefix")
with mpickpt.CheckpointManager(d) as mgr:
    mgr.save(1, {"w": np.arange(3.0)})
with mpickpt.CheckpointManager(d) as mgr:
    # (a name one rank alone lacks is now a strict restore's mismatch, reported by rank 0 for
    # all ranks before anything is read: a dtype one rank alone gets wrong fails on that rank)
    st = {"w": np.zeros(3, np.float32) if rank == LAST else np.zeros(3)}
    err = expect_error(mpickpt.MismatchError, lambda: mgr.restore_or_initialize(st),
                       "'w'", f"rank {LAST} (host ")
    check(str(err).startswith(f"rank {LAST} (host ") and str(err).count(" (host ") == 1,
          f"prefix: the message does not name rank {LAST} with its host once, first: {err}")

pc.say(f"test_hostile_py: {size} ranks, passed")
