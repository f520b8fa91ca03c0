"""Async saves (CheckpointManager(async_save=True)).

ok: save returns once the arrays are copied; the state is changed right away (arrays and plain
values); several saves in a row; all_steps() and latest_step() called again and again while saves
commit in the background; wait_until_finished(); restore (and restore at a step) gives the values
at the time of each save; retention (max_to_keep) applies to async saves; close() and the context
manager wait for the last save (a fresh reader finds it complete and verify() passes).

fault (run with MPICKPT_FAULT=<rank>:write): the background write of every save fails on that
rank; the failure is raised, the same on every rank, by the next call: wait_until_finished(), the
next save (which then saves nothing; also when one rank's registrations changed meanwhile),
close(); nothing is ever committed.

Usage: mpirun -np N python3 test_async.py OUTDIR ok|fault"""
import glob
import os
import sys

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, expect_error, rank, size

import mpickpt

N = 1 << 20  # 8 MiB of float64 per rank: a write that takes a while


def pattern(i):
    return (np.arange(N, dtype=np.float64) + 1000.0 * i + rank) * (1 if i % 2 else -1)


def make_state():
    lo = rank * N
    return {"w": mpickpt.Shard(np.zeros(N), (N * size,), (lo,)), "small": np.zeros(7, np.int32),
            "step": 0, "mine": mpickpt.PerRank({"rank": rank, "i": 0})}


def fill(state, i):
    state["w"].local[:] = pattern(i)
    state["small"][:] = i
    state["step"] = i
    state["mine"].value = {"rank": rank, "i": i}


def check_state(state, i, what):
    check_bits(state["w"].local, pattern(i), f"{what}: w")
    check_bits(state["small"], np.full(7, i, np.int32), f"{what}: small")
    check(state["step"] == i and state["mine"].value == {"rank": rank, "i": i},
          f"{what}: plain values {state['step']} {state['mine'].value}")


def scribble(state):
    state["w"].local[:] = np.nan
    state["small"][:] = -1
    state["step"] = -1
    state["mine"].value = {"rank": -1, "i": -1}


def kept(saves):
    """all_steps() once `saves` saves committed (max_to_keep=2)."""
    return [10 * j for j in range(1, saves + 1)][-2:]


def ok():
    d = pc.outdir("run")
    state = make_state()
    mgr = mpickpt.CheckpointManager(d, async_save=True, max_to_keep=2)
    check(mgr.latest_step() is None and mgr.all_steps() == [], "a fresh directory")
    polls = 0
    for i in range(1, 6):
        fill(state, i)
        path = mgr.save(10 * i, state)
        check(path == os.path.join(d, f"ckpt-{i}"), f"save returned {path}")
        scribble(state)  # at once: the save holds its own copy
        # the kept list, read again and again while the save commits in the background (the
        # commit replaces it: each read is a copy, never torn), until this rank sees the commit
        latest = None
        while latest != 10 * i:
            steps = mgr.all_steps()
            check(steps in (kept(i - 1), kept(i)), f"steps {steps} while save {i} commits")
            latest = mgr.latest_step()
            check(latest in (10 * (i - 1) if i > 1 else None, 10 * i), f"latest {latest}")
            polls += 1
    mgr.wait_until_finished()
    check(mgr.all_steps() == [40, 50] and mgr.latest_step() == 50, f"{mgr.all_steps()}")
    pc.comm.Barrier()
    indexes = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.index")))
    check(indexes == ["ckpt-4.index", "ckpt-5.index"], f"retention left {indexes}")
    info = mgr.restore(state)
    check(info["step"] == 50, f"{info}")
    check_state(state, 5, "latest")
    info = mgr.restore(state, step=40)
    check(info["step"] == 40, f"{info}")
    check_state(state, 4, "step 40")
    # a save right after a restore, and close() waits for it
    fill(state, 6)
    mgr.save(60, state)
    scribble(state)
    mgr.close()
    pc.comm.Barrier()
    with mpickpt.open(os.path.join(d, "ckpt-6")) as ck:
        ck.verify()
        check_bits(ck["w"][rank * N:(rank + 1) * N], pattern(6), "open ckpt-6 after close")
        check(ck.json["step"] == 6 and ck.json_of_rank(rank)["mine/i"] == 6, f"{ck.json}")
    # the context manager waits too
    d2 = pc.outdir("ctx")
    with mpickpt.CheckpointManager(d2, async_save=True) as mgr:
        fill(state, 7)
        p = mgr.save(70, state)
        scribble(state)
    pc.comm.Barrier()
    with mpickpt.open(p) as ck:
        ck.verify()
        check_bits(ck["small"].read(), np.full(7, 7, np.int32), "open after the with block")
    with mpickpt.CheckpointManager(d2) as mgr:
        mgr.restore(state)
    check_state(state, 7, "the with block's save")
    pc.say(f"async ok ({polls} polls of the kept list during saves on rank 0)")


def fault():
    spec = os.environ.get("MPICKPT_FAULT", "")
    check(spec.endswith(":write"), f"run with MPICKPT_FAULT=<rank>:write, not {spec!r}")
    bad = int(spec.split(":")[0])
    d = pc.outdir("fault")
    state = make_state()
    needles = ("injected fault", f"rank {bad}")
    mgr = mpickpt.CheckpointManager(d, async_save=True)
    fill(state, 1)
    mgr.save(10, state)  # returns: the write fails in the background
    scribble(state)
    expect_error(mpickpt.FileSystemError, mgr.wait_until_finished, *needles)
    mgr.wait_until_finished()  # reported once
    # the next save reports the previous one's failure and saves nothing
    mgr.save(20, state)
    expect_error(mpickpt.FileSystemError, lambda: mgr.save(30, state), *needles)
    check(mgr.all_steps() == [], f"steps {mgr.all_steps()}")
    # a failure pending while the last rank alone changed its registrations (its array rebound):
    # its registration waits for the failed save without taking its failure, so every rank's
    # next save reports it (before, that rank's took it alone and the others waited for it in
    # the save's collectives)
    mgr.save(35, state)
    if rank == size - 1:
        state["small"] = state["small"].copy()  # the same values, another buffer
    expect_error(mpickpt.FileSystemError, lambda: mgr.save(36, state), *needles)
    check(mgr.all_steps() == [], f"steps {mgr.all_steps()}")
    # close() reports a failure still pending
    mgr.save(40, state)
    expect_error(mpickpt.FileSystemError, mgr.close, *needles)
    mgr.close()  # closed: a no-op
    pc.comm.Barrier()
    left = sorted(os.listdir(d))
    check(not [f for f in left if f.endswith(".index") or ".data-" in f], f"committed: {left}")
    with mpickpt.CheckpointManager(d) as mgr:
        check(mgr.restore_or_initialize(state) is None, "nothing to restore")
    pc.say(f"async failures on rank {bad} ok: {left}")


if __name__ == "__main__":
    {"ok": ok, "fault": fault}[sys.argv[2]]()
    pc.comm.Barrier()
