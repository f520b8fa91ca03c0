"""Falling back past damaged checkpoints, and restoring a given step, in both layouts.

An empty directory: restore_or_initialize() returns None, restore() is NotFoundError, no steps.
Three saves (steps 10, 20, 30): all_steps(), latest_step(). Then, one at a time, the latest
intact checkpoint is damaged and a fresh manager restores from the one before, with
info['skipped'] counting the damaged ones and every value (shard, replicated array, plain
values) that of the older step: a byte flipped inside a large tensor's data (found with h5py's
get_offset), a data file truncated, a byte flipped inside the small tensors packed together
(per-rank layout) or a small tensor's dataset (shared). restore(state, step=S) restores that step;
a damaged or unknown step is CorruptError / NotFoundError on every rank. With all three damaged,
restore() is NotFoundError and restore_or_initialize() None; the next save still works.

Usage: mpirun -np N python3 test_fallback.py OUTDIR"""
import glob
import os

import numpy as np

import pycheck as pc
from nompi import flip_byte
from pycheck import check, check_bits, expect_error, rank, size

import mpickpt
from mpickpt import CorruptError, NotFoundError

BIG = (1 << 18) + 5  # float32 per rank: over the 1 MiB pack limit, a dataset of its own


def make_state():
    return {"w": mpickpt.Shard(np.zeros(BIG, np.float32), (BIG * size,), (BIG * rank,)),
            "r": np.zeros(300), "tiny": np.zeros(3, np.int8), "step": 0,
            "pr": mpickpt.PerRank([0, ""])}


def fill(state, step):
    state["w"].local[:] = np.arange(BIG, dtype=np.float32) * step + rank
    state["r"][:] = np.linspace(0, step, 300)
    state["tiny"][:] = step // 10
    state["step"] = step
    state["pr"].value[:] = [step + rank, f"r{rank}@{step}"]


def expect(state, step, what):
    want = make_state()
    fill(want, step)
    check_bits(state["w"].local, want["w"].local, f"{what}: w")
    check_bits(state["r"], want["r"], f"{what}: r")
    check_bits(state["tiny"], want["tiny"], f"{what}: tiny")
    check(state["step"] == step and state["pr"].value == want["pr"].value,
          f"{what}: plain values {state['step']} {state['pr'].value}")


def scribble(state):
    state["w"].local[:] = -1
    state["r"][:] = -1
    state["tiny"][:] = -1
    state["step"] = -1
    state["pr"].value[:] = [-1, ""]


def damage(prefix, how):
    """Rank 0 damages checkpoint `prefix`: 'big' flips a byte in the middle of w's data, 'small'
    one at the start of the small tensors' data, 'truncate' cuts the first data file in half."""
    files = sorted(glob.glob(prefix + ".data-*"))
    check(files, f"no data files for {prefix}")
    if how == "truncate":
        os.truncate(files[0], os.path.getsize(files[0]) // 2)
        return f"{os.path.basename(files[0])} truncated"
    # w's piece of rank 0 (shared: the whole tensor), the small tensors where they are
    if how == "big":
        want = ("/tensors/w", "/tensors/w#0")
    else:
        want = ("/packs/rank-", "/tensors/tiny")
    target = [(f, d) for f in files for d in pc.datasets(f) if d.startswith(want)]
    check(target, f"{how}: no dataset among {[(f, pc.datasets(f)) for f in files]}")
    f, ds = target[0]
    off = pc.data_offset(f, ds)
    flip_byte(f, off + (BIG * 4 // 2 if how == "big" else 0))
    return f"a byte of {os.path.basename(f)}:{ds} flipped"


def run(layout):
    d = pc.outdir(layout)
    state = make_state()
    with mpickpt.CheckpointManager(d, layout=layout, max_to_keep=None) as mgr:
        check(mgr.restore_or_initialize(state) is None, "restore_or_initialize of nothing")
        expect_error(NotFoundError, lambda: mgr.restore(state), "no valid checkpoint", d)
        check(mgr.latest_step() is None and mgr.all_steps() == [], "no steps yet")
        for step in (10, 20, 30):
            fill(state, step)
            mgr.save(step, state, epoch=step // 10)
        check(mgr.all_steps() == [10, 20, 30] and mgr.latest_step() == 30, f"{mgr.all_steps()}")

    def fresh_restore(step, skipped, what):
        scribble(state)
        with mpickpt.CheckpointManager(d, layout=layout) as mgr:
            check(mgr.all_steps() == [10, 20, 30], f"{what}: steps {mgr.all_steps()}")
            info = mgr.restore(state)
            check(info["step"] == step and info["skipped"] == skipped and
                  info["epoch"] == step // 10, f"{what}: info {info}")
            pc.same_everywhere((info["prefix"], info["skipped"]), "restored checkpoint")
            expect(state, step, what)
            scribble(state)
            info = mgr.restore_or_initialize(state)
            check(info["step"] == step and info["skipped"] == skipped, f"{what}: {info}")
            expect(state, step, what + " (restore_or_initialize)")

    fresh_restore(30, 0, "intact")
    for ckpt, how, step, skipped in ((3, "big", 20, 1), (2, "truncate", 10, 2)):
        pc.comm.Barrier()
        what = damage(os.path.join(d, f"ckpt-{ckpt}"), how) if rank == 0 else None
        what = pc.comm.bcast(what)
        pc.comm.Barrier()
        fresh_restore(step, skipped, f"ckpt-{ckpt}: {what}")

    with mpickpt.CheckpointManager(d, layout=layout) as mgr:
        for step in (10, 20, 30):  # the kept list is not changed by damage
            if step == 10:
                scribble(state)
                check(mgr.restore(state, step=10)["step"] == 10, "restore step 10")
                expect(state, 10, "restore(step=10)")
            else:
                expect_error(CorruptError, lambda: mgr.restore(state, step=step),
                             f"ckpt-{step // 10}")
        expect_error(NotFoundError, lambda: mgr.restore(state, step=99), "99")

    # the last intact one damaged too: nothing to restore
    pc.comm.Barrier()
    if rank == 0:
        damage(os.path.join(d, "ckpt-1"), "small")
    pc.comm.Barrier()
    scribble(state)
    with mpickpt.CheckpointManager(d, layout=layout) as mgr:
        expect_error(NotFoundError, lambda: mgr.restore(state), "no valid checkpoint",
                     "3 damaged")
        check(mgr.restore_or_initialize(state) is None, "all damaged: initialize")
        fill(state, 40)
        check(mgr.save(40, state) == os.path.join(d, "ckpt-4"), "the next save")
        scribble(state)
        check(mgr.restore(state)["skipped"] == 0, "restore of the new save")
        expect(state, 40, "after all the damage")
    pc.say(f"{layout}: fallback at {size} ranks ok")


if __name__ == "__main__":
    for layout in ("per-rank", "shared"):
        run(layout)
    pc.comm.Barrier()
