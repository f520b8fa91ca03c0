"""The default layout (issue 30): with neither layout= nor MPICKPT_LAYOUT, a job whose ranks are all
on one node (the test suite's: one machine) saves per-rank (a data file per rank); with
MPICKPT_RANKS_PER_NODE (simulated nodes) it saves per-node as before. A checkpoint of either layout
restores with the other (the format is the same). Values are read back on every rank."""
import glob
import os

import numpy as np

import mpickpt
import pycheck as pc
from pycheck import check, rank, size

for v in ("MPICKPT_LAYOUT", "MPICKPT_RANKS_PER_NODE"):
    os.environ.pop(v, None)


def state(step):
    return {"rep": np.arange(1000, dtype=np.float32) + step,
            "mine": mpickpt.PerRank(np.full(300, 10 * rank + step, dtype=np.int64))}


def restore_check(d, layout, step, what):
    got = state(-1)
    with mpickpt.CheckpointManager(d, layout=layout) as mgr:
        mgr.restore(got)
    want = state(step)
    check(np.array_equal(got["rep"], want["rep"]), f"{what}: replicated values")
    check(np.array_equal(got["mine"].value, want["mine"].value), f"{what}: per-rank values")


def save(d, layout, step, env=None):
    """Saves state(step) into d with `layout` (None: the default) and MPICKPT_* `env`; returns
    (the checkpoint's layout, its data files)."""
    for k, v in (env or {}).items():
        os.environ[k] = v
    try:
        with mpickpt.CheckpointManager(d, layout=layout) as mgr:
            path = mgr.save(step, state(step))
    finally:
        for k in env or {}:
            os.environ.pop(k, None)
    pc.comm.Barrier()
    meta = mpickpt.open(path).meta
    files = glob.glob(glob.escape(path) + ".data-*")
    return meta["layout"], len(files)


# 1. the default on one node: per-rank, a file per rank
d1 = pc.outdir("default")
lay, nfiles = save(d1, None, 3)
check(lay == "per-rank", f"default layout on one node: {lay} (want per-rank)")
check(nfiles == size, f"default layout on one node: {nfiles} data files (want {size})")
restore_check(d1, None, 3, "default")

# 2. simulated nodes of 2 ranks: per-node, as before
d2 = pc.outdir("simulated")
lay, nfiles = save(d2, None, 4, {"MPICKPT_RANKS_PER_NODE": "2"})
check(lay == "per-node", f"default layout with MPICKPT_RANKS_PER_NODE=2: {lay} (want per-node)")
check(nfiles == (size + 1) // 2, f"simulated nodes of 2: {nfiles} data files")
restore_check(d2, None, 4, "per-node checkpoint, default (per-rank) restore")

# 3. the other way round: a per-rank checkpoint restored by a per-node saver
restore_check(d1, "per-node", 3, "per-rank checkpoint, per-node restore")

# 4. an explicit layout still wins
lay, nfiles = save(pc.outdir("explicit"), "per-node", 5)
check(lay == "per-node" and nfiles == 1, f"layout='per-node' on one node: {lay}, {nfiles} files")
lay, _ = save(pc.outdir("env"), None, 6, {"MPICKPT_LAYOUT": "per-node"})
check(lay == "per-node", f"MPICKPT_LAYOUT=per-node: {lay}")

pc.say(f"default layout: per-rank on one node, per-node with simulated nodes, at {size} ranks ok")
