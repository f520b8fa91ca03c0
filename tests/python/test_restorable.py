"""One policy for which checkpoint is restorable (issue 29): CheckpointManager's all_steps(),
latest_step() and restore(state, step=...) are the C manager's decisions, so `mpickpt pin` and
`mpickpt drop` (the real CLI, run by rank 0 between jobs, with no manager open on the directory)
and the storage levels are honoured by an explicit step too.

Five saves (steps 10..50). `mpickpt drop DIR ckpt-3 ckpt-1`: all_steps() is [20, 40, 50],
latest_step() 50, restore(step=30) and restore(step=10) are NotFoundError naming the drop and its
undo on every rank; steps 40 and 20 restore exactly. `mpickpt pin DIR ckpt-2`: the set-aside 40
and 50 are neither listed nor restorable by step (NotFoundError naming the pin), 20 is; a save
(60) after it is listed and restorable. A byte flipped in ckpt-6: restore(step=60) is
CorruptError naming ckpt-6 (never another checkpoint's values: the plain values stay as they
were), restore() falls back to the pinned 20. Levels: with a cache, the cache-only step 30 is
listed and restored by step from the cache, step 20 from the cache first; a manager without the
cache lists only 20 and refuses 30 naming the cache.

Usage: mpirun -np N python3 test_restorable.py OUTDIR   (MPICKPT_CLI: the mpickpt program)"""
import glob
import os

import pycheck as pc
from nompi import flip_byte
from pycheck import check, expect_error, rank, size

import mpickpt
from mpickpt import CorruptError, NotFoundError

N = 1000


def make_state():
    return pc.shard_state(N)


fill, expect, cli = pc.shard_fill, pc.shard_expect, pc.run_cli


def restore_at(mgr, step, what, where=None):
    """restore(step=step) gives every value of that step, on every rank, from `where`."""
    state = make_state()
    fill(state, -1)
    info = mgr.restore(state, step=step)
    pc.same_everywhere((info["step"], info["save_counter"], info["skipped"]), f"{what}: info")
    check(info["restored"] and info["step"] == step and info["skipped"] == 0, f"{what}: {info}")
    if where is not None:
        check(info["prefix"].startswith(where), f"{what}: restored from {info['prefix']}")
    expect(state, step, what)
    return info


def steps(mgr, want, latest, what):
    got = (mgr.all_steps(), mgr.latest_step())
    pc.same_everywhere(got, f"{what}: steps")
    check(got == (want, latest), f"{what}: all_steps, latest_step {got}, expected "
                                 f"{(want, latest)}")


def refused(mgr, step, *needles):
    state = make_state()
    fill(state, -1)
    expect_error(NotFoundError, lambda: mgr.restore(state, step=step), *needles)
    check(state["step"] == -1, f"step {step} refused, yet plain values were put back")


def flip_data_byte(prefix):
    """Rank 0 flips a byte of the first dataset of the checkpoint's first data file."""
    pc.comm.Barrier()
    if rank == 0:
        f = sorted(glob.glob(prefix + ".data-*"))[0]
        ds = [x for x in pc.datasets(f) if x.startswith(("/packs/rank-", "/tensors/"))][0]
        flip_byte(f, pc.data_offset(f, ds) + 3)
    pc.comm.Barrier()


def pin_and_drop():
    d = pc.outdir("restorable")
    state = make_state()
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        for step in (10, 20, 30, 40, 50):
            fill(state, step)
            mgr.save(step, state)
        steps(mgr, [10, 20, 30, 40, 50], 50, "five saves")

    cli("drop", d, "ckpt-3", "ckpt-1")
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        steps(mgr, [20, 40, 50], 50, "ckpt-3 and ckpt-1 dropped")
        refused(mgr, 30, "ckpt-3", "dropped", "mpickpt drop --undo")
        refused(mgr, 10, "ckpt-1", "dropped")
        refused(mgr, 99, "99", "20, 40, 50")
        restore_at(mgr, 40, "dropped 3 and 1: step 40")
        restore_at(mgr, 20, "dropped 3 and 1: step 20")
        info = mgr.restore(make_state())
        check(info["step"] == 50, f"restore() after the drop: {info}")

    cli("pin", d, "ckpt-2")
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        steps(mgr, [20], 20, "pinned ckpt-2")
        refused(mgr, 40, "ckpt-4", "set aside", "ckpt-2", "mpickpt pin")
        refused(mgr, 50, "ckpt-5", "set aside", "ckpt-2")
        refused(mgr, 30, "ckpt-3", "dropped")
        restore_at(mgr, 20, "pinned step 20")
        fill(state, 60)
        check(mgr.save(60, state) == os.path.join(d, "ckpt-6"), "the save after the pin")
        steps(mgr, [20, 60], 60, "a save after the pin")
        restore_at(mgr, 60, "the save after the pin")
    pc.comm.Barrier()
    for n, there in ((1, False), (3, False), (4, True), (5, True)):
        check(os.path.exists(os.path.join(d, f"ckpt-{n}.index")) == there,
              f"ckpt-{n}: {'set aside, kept' if there else 'dropped, deleted'}")

    flip_data_byte(os.path.join(d, "ckpt-6"))
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        steps(mgr, [20, 60], 60, "ckpt-6 damaged (not known before reading it)")
        state = make_state()
        fill(state, -1)
        expect_error(CorruptError, lambda: mgr.restore(state, step=60), "ckpt-6")
        check(state["step"] == -1, "the damaged step 60: plain values were put back")
        info = mgr.restore(state)
        check(info["step"] == 20 and info["skipped"] == 1, f"restore() past ckpt-6: {info}")
        expect(state, 20, "restore() past the damaged ckpt-6")


def levels():
    d = pc.outdir("restorable-levels")
    cache = pc.outdir("restorable-cache")
    opts = dict(cache_dir=os.path.join(cache, "%n"), redundancy="none", persist_every=2,
                cache_max_to_keep=2, max_to_keep=None)
    state = make_state()
    with mpickpt.CheckpointManager(d, **opts) as mgr:
        for step in (10, 20, 30):
            fill(state, step)
            mgr.save(step, state)
        steps(mgr, [20, 30], 30, "levels: ckpt-2 in both, ckpt-3 in the cache")
    with mpickpt.CheckpointManager(d, **opts) as mgr:
        steps(mgr, [20, 30], 30, "levels: a new manager with the cache")
        restore_at(mgr, 30, "levels: step 30 from the cache", where=cache)
        restore_at(mgr, 20, "levels: step 20 from the cache first", where=cache)
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        steps(mgr, [20], 20, "levels: a manager without the cache")
        refused(mgr, 30, "ckpt-3", "cache")
        restore_at(mgr, 20, "levels: step 20 from the directory", where=d)


def main():
    pin_and_drop()
    levels()
    pc.say(f"restorable at {size} ranks ok")


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
