"""Sharded and per-rank values written by N ranks, restored by M (4 -> 3, 2 -> 4): a writer run,
then a reader run (its own CTest entry, DEPENDS on the writer) on the writer's directory.

Shards: 1-d uneven blocks, 2-d blocks along rows, along columns, on a 2-d grid of ranks, and a
tensor smaller than the rank count (some ranks own an empty block); restored onto the reader's own
tiling, every element checked. PerRank arrays, dicts and scalars: restored on the ranks the writer
had; on the others an error on every rank by default (nothing changed), and with
skip_missing_per_rank=True those ranks keep their own values. A state without PerRank values
restores onto more ranks by default. Both layouts.

Usage: mpirun -np N python3 test_nm.py write OUTDIR
       mpirun -np M python3 test_nm.py read WRITERDIR N"""
import math
import os
import sys

import numpy as np

import pycheck as pc
from nm_values import EPOCH, LAYOUTS, SHARDS, STEP, global_values, per_rank
from pycheck import check, check_bits, expect_error, rank, size

import mpickpt


def split(n, parts, i):
    return i * n // parts, (i + 1) * n // parts


def grid_of(ranks):
    """(rows, cols) of a 2-d grid of `ranks` ranks, as square as it gets."""
    pr = max(d for d in range(1, int(math.isqrt(ranks)) + 1) if ranks % d == 0)
    return pr, ranks // pr


def box(name, ranks, r):
    """(offsets, counts) of rank r's block of tensor `name` on `ranks` ranks."""
    shape, _, how = SHARDS[name]
    if how == "1d" or how == "rows":
        lo, hi = split(shape[0], ranks, r)
        return (lo,) + (0,) * (len(shape) - 1), (hi - lo,) + tuple(shape[1:])
    if how == "cols":
        lo, hi = split(shape[1], ranks, r)
        return (0, lo), (shape[0], hi - lo)
    pr, pc_ = grid_of(ranks)
    (r0, r1), (c0, c1) = split(shape[0], pr, r // pc_), split(shape[1], pc_, r % pc_)
    return (r0, c0), (r1 - r0, c1 - c0)


def block(a, offsets, counts):
    return a[tuple(slice(o, o + c) for o, c in zip(offsets, counts))]


def make_state(fill, per_rank_values=True):
    """The state of this rank on `size` ranks: the right values (fill False) or sentinels."""
    state = {"rep": np.arange(6.0) if not fill else np.zeros(6), "epoch": 5 if not fill else 0}
    for name, (shape, dtype, _) in SHARDS.items():
        off, cnt = box(name, size, rank)
        local = np.ascontiguousarray(block(global_values(name), off, cnt))
        if fill:
            local.reshape(-1).view(np.uint8)[...] = 0xA5
        state[name] = mpickpt.Shard(local, shape, off)
    if not per_rank_values:
        return state
    arr, doc, scalar = per_rank(rank)
    if fill:
        arr, doc, scalar = np.full(4, -1, dtype=np.int64), {"rank": -1, "pos": -1, "tag": ""}, -1.0
    state["pr_arr"] = mpickpt.PerRank(arr)
    state["pr_json"] = mpickpt.PerRank(doc)
    state["pr_scalar"] = mpickpt.PerRank(scalar)
    return state


def write():
    for layout in LAYOUTS:
        with mpickpt.CheckpointManager(pc.outdir(layout), layout=layout) as mgr:
            mgr.save(STEP, make_state(False), epoch=EPOCH)
        with mpickpt.CheckpointManager(pc.outdir(layout + "-shared-only"), layout=layout) as mgr:
            mgr.save(STEP, make_state(False, per_rank_values=False), epoch=EPOCH)
    pc.say(f"wrote both layouts at {size} ranks")


def check_shards(state, what):
    for name in SHARDS:
        off, cnt = box(name, size, rank)
        sh = state[name]
        check(sh.offsets == off, f"{name}: offsets")
        check_bits(sh.local, np.ascontiguousarray(block(global_values(name), off, cnt)),
                   f"{what}: shard {name} at {off}+{cnt}")


def check_per_rank(state, restored, what):
    arr, doc, scalar = per_rank(rank) if restored else (
        np.full(4, -1, dtype=np.int64), {"rank": -1, "pos": -1, "tag": ""}, -1.0)
    check_bits(state["pr_arr"].value, arr, f"{what}: pr_arr")
    check(state["pr_json"].value == doc, f"{what}: pr_json {state['pr_json'].value} != {doc}")
    check(state["pr_scalar"].value == scalar, f"{what}: pr_scalar {state['pr_scalar'].value}")


def read(writer_dir, writers):
    for layout in LAYOUTS:
        d = os.path.join(writer_dir, layout)
        state = make_state(True)
        if size > writers:
            # ranks the writer did not have: their per-rank values cannot be restored
            with mpickpt.CheckpointManager(d) as mgr:
                expect_error(mpickpt.MismatchError, lambda: mgr.restore(state),
                             "parallel_component_" + str(writers))
            check_per_rank(state, False, f"{layout}: after the refused restore")
        with mpickpt.CheckpointManager(d, skip_missing_per_rank=size > writers) as mgr:
            info = mgr.restore(state)
        check(info["world_size"] == writers and info["step"] == STEP and info["epoch"] == EPOCH,
              f"info {info}")
        check_shards(state, f"{layout} {writers}->{size}")
        check_per_rank(state, rank < writers, f"{layout} {writers}->{size}")
        check_bits(state["rep"], np.arange(6.0), "rep")
        check(state["epoch"] == 5, "epoch")
        if rank == 0:  # the whole tensors, as the writer's tiling stored them
            ck = mpickpt.open(info["prefix"])
            for name in SHARDS:
                check_bits(ck[name].read(), global_values(name), f"open {name}")
            for r in range(writers):
                doc = ck.json_of_rank(r)
                check(doc["pr_json/rank"] == r and doc["pr_scalar"] == r * 1.5, f"{doc}")
            ck.close()
        # without PerRank values nothing stops a restore onto more ranks
        state = make_state(True, per_rank_values=False)
        with mpickpt.CheckpointManager(d + "-shared-only") as mgr:
            mgr.restore(state)
        check_shards(state, f"{layout} {writers}->{size} without PerRank")
        check(state["epoch"] == 5, "epoch")
        pc.say(f"{layout}: {writers} -> {size} ranks ok")


if __name__ == "__main__":
    if sys.argv[1] == "write":
        sys.argv.pop(1)
        write()
    else:
        read(sys.argv[2], int(sys.argv[3]))
    pc.comm.Barrier()
