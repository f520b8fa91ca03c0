"""The Python layer's own collective calls (issue 31): a CheckpointManager save or a TrainingState
back-up adds none to the C manager's calls (its status and a digest of the replicated aliases and
plain values' names ride the save's first collective: ckpt_manager_save_options), a restore
two (rank 0's record broadcast before the C call, whose first collective carries the status,
the aliases' digest and leniency: ckpt_manager_restore_options; one allgather after it, which
also compares the arrays' names when the state has aliases)
(docs/python.md, "Collective calls"); and the rare paths still agree: a bad leaf on one rank,
replicated plain values some rank lacks, aliases unlike across ranks, a restore that falls back
to another checkpoint than the one it peeked at. Counted by a proxy around the mpi4py
communicator (the C library's calls are counted by `mpickpt-bench --scenario collectives`,
ctest -R bench_collective_count).

Usage: mpirun -np N python3 test_py_collectives.py OUTDIR"""
import collections
import glob
import os

import numpy as np
import pycheck as pc
from pycheck import check, expect_error, rank, size

import mpickpt
from mpickpt import InvalidArgumentError, MismatchError

COLLECTIVES = {"allreduce", "Allreduce", "bcast", "Bcast", "allgather", "Allgather",
               "gather", "Gather", "barrier", "Barrier", "reduce", "Reduce", "scatter",
               "alltoall", "Allgatherv", "Gatherv", "Scatterv", "Alltoallv"}


class Counting:
    """An mpi4py communicator whose collective methods are counted by name."""

    def __init__(self, comm):
        self._inner = comm
        self.calls = collections.Counter()

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in COLLECTIVES:
            return attr

        def counted(*args, **kw):
            self.calls[name] += 1
            return attr(*args, **kw)

        return counted

    def total(self):
        n = sum(self.calls.values())
        self.calls.clear()
        return n


def state_of(step, alias=True):
    w = np.full(64, rank * 1000.0 + step)
    st = {"w": mpickpt.PerRank(w), "b": np.arange(8, dtype=np.float32) + step,
          "lr": 0.5 * step, "note": {"step": step}}
    if alias:
        st["w_view"] = st["b"]  # a replicated alias: the same array under two names
    return st


def main():
    d = pc.outdir("pycoll")
    mgr = mpickpt.CheckpointManager(d, max_to_keep=2)
    counting = Counting(mgr._comm)
    inner_comm = mgr._comm
    mgr._comm = counting
    try:
        for step in (1, 2, 3):
            mgr.save(step, state_of(step))
            n = counting.total()
            check(n == 0, f"save of step {step}: {n} Python collective calls, want 0")
        got = state_of(0)
        info = mgr.restore(got)
        n = counting.total()
        check(info is not None and info["step"] == 3, f"restored {info}")
        # 1 before the C call (rank 0's record), 1 after it, which also compares the arrays'
        # names (the state has aliases: C did not compare them)
        check(n == 2, f"restore: {n} Python collective calls, want 2")
        check(got["lr"] == 1.5 and got["note"] == {"step": 3}, f"plain values {got}")
        check(np.array_equal(got["w"].value, np.full(64, rank * 1000.0 + 3)), "per-rank w")
        check(np.array_equal(got["b"], np.arange(8, dtype=np.float32) + 3), "b")
        check(got["w_view"] is got["b"], "alias kept")

        # the record read before the C restore differs from the one it read (rewritten in
        # between): every rank raises, no plain value put back; the next restore is exact
        real = mpickpt._state.peek_record

        def rewritten(comm, prefix, per_rank):
            aliases, has_record, first = real(comm, prefix, per_rank)
            return aliases, has_record, first.replace(b'"lr": 1.5', b'"lr": 9.5')

        mpickpt._state.peek_record = rewritten
        try:
            got = state_of(0)
            expect_error(MismatchError, lambda: mgr.restore(got), "changed while restoring")
        finally:
            mpickpt._state.peek_record = real
        check(got["lr"] == 0.0 and got["note"] == {"step": 0}, f"plain values put back: {got}")
        counting.total()
        got = state_of(0)
        mgr.restore(got)
        check(got["lr"] == 1.5 and got["note"] == {"step": 3}, f"plain values {got}")
        counting.total()

        # a bad leaf on the last rank only: every rank raises the same error, nothing saved
        bad = state_of(4)
        if rank == size - 1:
            bad["obj"] = object()
        else:
            bad["obj"] = 1
        expect_error(InvalidArgumentError, lambda: mgr.save(4, bad), f"rank {size - 1}")
        n = counting.total()
        check(n == 0, f"refused save: {n} Python collective calls, want 0 (C agreed it)")
        check(mgr.latest_step() == 3, f"latest {mgr.latest_step()} after a refused save")
        # a strict restore whose arrays do not match, with aliases in the state: every rank
        # raises the same error listing the arrays, in the restore's one call after C's
        extra = state_of(0)
        extra["new_array"] = np.zeros(4)
        expect_error(MismatchError, lambda: mgr.restore(extra), "new_array")
        n = counting.total()
        check(n == 2, f"strict restore with aliases, arrays unlike: {n} calls, want 2")

        if size > 1:
            # replicated plain values some rank lacks: MismatchError on every rank
            odd = state_of(5)
            if rank == 0:
                odd["only_here"] = 7
            expect_error(MismatchError, lambda: mgr.save(5, odd), "only_here")
            n = counting.total()
            check(n == 1, f"names unlike: {n} Python collective calls, want 1 (the allgather)")
            # an alias on rank 0 only: stored as a tensor everywhere, restored exactly
            mixed = state_of(6, alias=(rank == 0))
            if rank != 0:
                mixed["w_view"] = np.arange(8, dtype=np.float32) + 6
            mgr.save(6, mixed)
            n = counting.total()
            check(n == 1, f"aliases unlike: {n} Python collective calls, want 1 (the allgather)")
            got = state_of(0, alias=False)
            got["w_view"] = np.zeros(8, dtype=np.float32)
            mgr.restore(got)
            check(np.array_equal(got["w_view"], np.arange(8, dtype=np.float32) + 6),
                  f"w_view {got['w_view']}")
            check(mgr.all_steps() == [3, 6], f"steps {mgr.all_steps()}: 6 saved once")
        # the newest checkpoint damaged: the restore peeks at it, falls back to the one before,
        # and broadcasts that one's record (one call more); every value is the older step's
        path = mgr.save(7, state_of(7))
        counting.total()
        if rank == 0:
            files = sorted(glob.glob(path + ".data-*"))
            check(files, f"no data files for {path}")
            for f in files:
                os.truncate(f, os.path.getsize(f) // 2)
        pc.comm.Barrier()
        got = state_of(0, alias=size == 1)
        if size > 1:
            got["w_view"] = np.zeros(8, dtype=np.float32)
        info = mgr.restore(got)
        n = counting.total()
        want = 6 if size > 1 else 3
        check(info["step"] == want and info["skipped"] == 1, f"fallback restored {info}")
        check(n == 3, f"restore falling back: {n} Python collective calls, want 3")
        check(got["lr"] == 0.5 * want and got["note"] == {"step": want}, f"plain values {got}")
        check(np.array_equal(got["w"].value, np.full(64, rank * 1000.0 + want)), "w after fallback")
        pc.same_everywhere(mgr.latest_step(), "latest step")
    finally:
        mgr._comm = inner_comm
        mgr.close()

    # a TrainingState: a back-up adds no call, a restore two
    t_state = state_of(1)
    t = mpickpt.TrainingState(os.path.join(d, "train"), t_state)
    counting = Counting(t._comm)
    inner_comm = t._comm
    t._comm = counting
    try:
        t.back_up(epoch=1, step=5)
        n = counting.total()
        check(n == 0, f"back_up: {n} Python collective calls, want 0")
        t_state["lr"] = -1.0
        t_state["b"][:] = -1
        info = t.restore()
        n = counting.total()
        check(info is not None and info["step"] == 5, f"training restored {info}")
        check(n == 2, f"training restore: {n} Python collective calls, want 2")
        check(t_state["lr"] == 0.5 and np.array_equal(t_state["b"], np.arange(8) + 1.0),
              f"training values {t_state['lr']} {t_state['b']}")
        check(t_state["w_view"] is t_state["b"], "training alias kept")
    finally:
        t._comm = inner_comm
        t.close()
    pc.say("ok")


main()
