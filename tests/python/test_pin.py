"""Choosing the restart point from Python: `mpickpt pin` and `mpickpt drop` (the CLI, run by
rank 0 between jobs as an operator would) are honoured by CheckpointManager.

Four saves (steps 10..40); `mpickpt pin DIR ckpt-2`: a new manager's latest_step() is 20 and
restore() gives every value of step 20 on every rank; the next save is ckpt-5 and the set-aside
ckpt-3 and ckpt-4 are still on disk after retention (max_to_keep 2); a later manager restores the
newest save (50). `mpickpt drop DIR ckpt-5`: the restore is step 20 again (ckpt-2, the pin, is
the newest restorable one); a damaged pinned checkpoint is NotFoundError on every rank, not a
silent start from an older one; `mpickpt pin DIR --clear` then restores ckpt-4 (step 40).

Usage: mpirun -np N python3 test_pin.py OUTDIR   (MPICKPT_CLI: the mpickpt program)"""
import glob
import os

import pycheck as pc
from pycheck import check, expect_error, rank

import mpickpt
from mpickpt import NotFoundError

N = 1000


def make_state():
    return pc.shard_state(N)


fill, expect, cli = pc.shard_fill, pc.shard_expect, pc.run_cli


def restored_step(d, what, want):
    state = make_state()
    with mpickpt.CheckpointManager(d, max_to_keep=2) as mgr:
        check(mgr.latest_step() == want, f"{what}: latest_step {mgr.latest_step()}")
        info = mgr.restore(state)
        pc.same_everywhere(info["prefix"], f"{what}: restored prefix")
        check(info["step"] == want, f"{what}: restored step {info['step']}")
        expect(state, want, what)


def main():
    d = pc.outdir("pin")
    state = make_state()
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        for step in (10, 20, 30, 40):
            fill(state, step)
            mgr.save(step, state)
    cli("pin", d, "ckpt-2")
    restored_step(d, "pinned ckpt-2", 20)
    with mpickpt.CheckpointManager(d, max_to_keep=2) as mgr:
        mgr.restore(state)
        fill(state, 50)
        check(mgr.save(50, state) == os.path.join(d, "ckpt-5"), "the save after the pin")
        check(mgr.latest_step() == 50, f"latest after the save: {mgr.latest_step()}")
    pc.comm.Barrier()
    for n in (3, 4):  # set aside: kept whatever max_to_keep
        check(os.path.exists(os.path.join(d, f"ckpt-{n}.index")), f"ckpt-{n} set aside, kept")
    restored_step(d, "a save newer than the pin", 50)
    cli("drop", d, "ckpt-5")
    restored_step(d, "ckpt-5 dropped", 20)
    pc.comm.Barrier()
    if rank == 0:
        f = sorted(glob.glob(os.path.join(d, "ckpt-2.data-*")))[0]
        os.truncate(f, os.path.getsize(f) // 2)
    pc.comm.Barrier()
    with mpickpt.CheckpointManager(d, max_to_keep=2) as mgr:
        expect_error(NotFoundError, lambda: mgr.restore(make_state()), "ckpt-2", "pinned")
    cli("pin", d, "--clear")
    restored_step(d, "pin cleared", 40)


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
