"""The Python layer's own collective calls (issue 31): a CheckpointManager save adds one allreduce
to the C manager's calls (status, digests of the replicated aliases and plain values' names), a
restore five (three before the C call, two after it; one more to compare the arrays' names when
the state has aliases) (docs/python.md, "Collective calls"); and the rare paths still
agree: a bad leaf on one rank, replicated plain values some rank lacks, aliases unlike across
ranks. Counted by a proxy around the manager's mpi4py communicator (the C library's calls are
counted by `mpickpt-bench --scenario collectives`, ctest -R bench_collective_count).

Usage: mpirun -np N python3 test_py_collectives.py OUTDIR"""
import collections

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
            check(n == 1, f"save of step {step}: {n} Python collective calls, want 1")
        got = state_of(0)
        info = mgr.restore(got)
        n = counting.total()
        check(info is not None and info["step"] == 3, f"restored {info}")
        # 3 before the C call, 2 after it, 1 more to compare the arrays' names (the state has
        # aliases: C did not compare them)
        check(n == 6, f"restore: {n} Python collective calls, want 6")
        check(got["lr"] == 1.5 and got["note"] == {"step": 3}, f"plain values {got}")
        check(np.array_equal(got["w"].value, np.full(64, rank * 1000.0 + 3)), "per-rank w")
        check(np.array_equal(got["b"], np.arange(8, dtype=np.float32) + 3), "b")
        check(got["w_view"] is got["b"], "alias kept")

        # a bad leaf on the last rank only: every rank raises the same error, nothing saved
        bad = state_of(4)
        if rank == size - 1:
            bad["obj"] = object()
        else:
            bad["obj"] = 1
        expect_error(InvalidArgumentError, lambda: mgr.save(4, bad), f"rank {size - 1}")
        check(mgr.latest_step() == 3, f"latest {mgr.latest_step()} after a refused save")

        if size > 1:
            # replicated plain values some rank lacks: MismatchError on every rank
            odd = state_of(5)
            if rank == 0:
                odd["only_here"] = 7
            expect_error(MismatchError, lambda: mgr.save(5, odd), "only_here")
            # an alias on rank 0 only: stored as a tensor everywhere, restored exactly
            mixed = state_of(6, alias=(rank == 0))
            if rank != 0:
                mixed["w_view"] = np.arange(8, dtype=np.float32) + 6
            mgr.save(6, mixed)
            got = state_of(0, alias=False)
            got["w_view"] = np.zeros(8, dtype=np.float32)
            mgr.restore(got)
            check(np.array_equal(got["w_view"], np.arange(8, dtype=np.float32) + 6),
                  f"w_view {got['w_view']}")
        pc.same_everywhere(mgr.latest_step(), "latest step")
    finally:
        mgr._comm = inner_comm
        mgr.close()
    pc.say("ok")


main()
