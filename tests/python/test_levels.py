"""Storage levels from Python (docs/levels.md): CheckpointManager(cache_dir=..., redundancy=...,
persist_every=..., cache_max_to_keep=...). Nodes are simulated (MPICKPT_RANKS_PER_NODE); with two
or more, redundancy is 'partner'.

Three saves (persist every 2nd, the cache and the directory keep 2 each): save() returns this
node's cache path; the entries' levels are ckpt-2 ['persistent', 'cache'] and ckpt-3 ['cache'];
a fresh manager restores ckpt-3 from the cache (every value, on every rank); with every cache
directory removed it restores ckpt-2 from the directory (one skipped). A bad redundancy is a
ValueError. restore(step=) of a checkpoint only in the cache restores it from the cache; with
the caches lost it is an error naming it (never step 20 instead).

Usage: mpirun -np N python3 test_levels.py OUTDIR"""
import os
import shutil

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, expect_error, rank, size

import mpickpt
from mpickpt import NotFoundError

N = 1000


def make_state():
    return {"w": mpickpt.Shard(np.zeros(N, np.float32), (N * size,), (N * rank,)),
            "b": np.zeros(7), "step": 0}


def fill(state, step):
    state["w"].local[:] = np.arange(N, dtype=np.float32) + step * 1000 + rank
    state["b"][:] = step
    state["step"] = step


def expect(state, step, what):
    want = make_state()
    fill(want, step)
    check_bits(state["w"].local, want["w"].local, f"{what}: w")
    check_bits(state["b"], want["b"], f"{what}: b")
    check(state["step"] == step, f"{what}: step {state['step']}")


def main():
    d = pc.outdir("levels")
    cache = pc.outdir("levels-cache")
    rpn = int(os.environ.get("MPICKPT_RANKS_PER_NODE") or 0)
    nnodes = (size + rpn - 1) // rpn if rpn else 1
    red = "partner" if nnodes >= 2 else "none"
    opts = dict(cache_dir=os.path.join(cache, "%n"), redundancy=red, persist_every=2,
                cache_max_to_keep=2, max_to_keep=2)
    state = make_state()
    with mpickpt.CheckpointManager(d, **opts) as mgr:
        for step in (10, 20, 30):
            fill(state, step)
            path = mgr.save(step, state)
            check(path.startswith(cache), f"save returned {path}")
        levels = [(e["prefix"], e["levels"]) for e in mgr._entries()]
        check(levels == [("ckpt-2", ["persistent", "cache"]), ("ckpt-3", ["cache"])],
              f"levels {levels}")
        pc.same_everywhere(levels, "levels")
        fill(state, -1)  # restore(step=) of a checkpoint only in the cache: from the cache
        info = mgr.restore(state, step=30)
        check(info["prefix"].startswith(cache) and info["step"] == 30, f"step=30: {info}")
        expect(state, 30, "restore(step=30) from the cache")
    check(os.path.exists(os.path.join(d, "ckpt-2.index")) and
          not os.path.exists(os.path.join(d, "ckpt-3.index")), "the directory's checkpoints")

    fill(state, -1)
    with mpickpt.CheckpointManager(d, **opts) as mgr:
        info = mgr.restore(state)
        check(info["step"] == 30 and info["skipped"] == 0, f"from the cache: {info}")
        expect(state, 30, "restored from the cache")
    pc.comm.Barrier()
    if rank == 0:
        shutil.rmtree(cache)
    pc.comm.Barrier()
    fill(state, -1)
    with mpickpt.CheckpointManager(d, **opts) as mgr:
        # the one asked for is lost: an error naming it, never another checkpoint instead
        expect_error(NotFoundError, lambda: mgr.restore(state, step=30), "ckpt-3")
        check(state["step"] == -1, "step=30 lost, yet plain values were put back")
        info = mgr.restore(state)
        check(info["step"] == 20 and info["skipped"] == 1, f"every cache lost: {info}")
        expect(state, 20, "restored from the directory")
    expect_error(ValueError, lambda: mpickpt.CheckpointManager(d, cache_dir=cache,
                                                               redundancy="mirror"), "mirror")
    pc.say(f"levels at {size} ranks in {nnodes} nodes ({red}) ok")


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
