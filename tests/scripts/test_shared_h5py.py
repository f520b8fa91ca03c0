#!/usr/bin/python3
"""A shared-layout checkpoint written by the saver, read with h5py (a reader that is not ours).

    /usr/bin/python3 test_shared_h5py.py MPICKPT_CLI PREFIX STEP NRANKS

PREFIX was written by `test_saver OUTDIR write shared NRANKS STEP` (tests/mpi/model.h).
Checks that the partitioned tensors "w" and "w_cols" are each ONE dataset with the global shape,
the exact values of the model and the right attributes; and that every tensor the index lists,
assembled from its pieces through h5py, holds exactly the model's values. The value formulas are
those of tests/mpi/model.h: keep them in sync.
"""
import json
import os
import re
import subprocess
import sys

import h5py
import numpy as np

from scriptcheck import check, finish

if len(sys.argv) != 5:
    sys.exit("usage: test_shared_h5py.py MPICKPT_CLI PREFIX STEP NRANKS")
CLI, PREFIX, STEP, NRANKS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
DIR, BASE = os.path.split(PREFIX)
DATA = f"{BASE}.data-00000-of-00001"


# ---- the model (tests/mpi/model.h) ----
W_ROWS, W_COLS, WC_ROWS, WC_COLS = 37, 5, 4, 9
ID_W, ID_W_COLS, ID_BIAS, ID_GLOBAL_STEP, ID_FULL0 = 1, 2, 3, 5, 100


def float_values(tid, shape, dtype):
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    return ((tid * 1000 + flat) * 0.5 + STEP).astype(dtype).reshape(shape)


def int_values(tid, shape):
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    return (-(tid * 1000000 + flat * 1000 + STEP)).astype(np.int64).reshape(shape)


def rng_values(component):
    return np.array([(1 << 63) + component * 1000000 + j * 1000 + STEP for j in range(2)],
                    dtype=np.uint64)


def blob_values(rank):
    # tm_blob_text: its length changes with the step
    return np.frombuffer(f"loader rank={rank} step={STEP} {'x' * (STEP % 8)}".encode(),
                         dtype=np.uint8)


expected = {
    "w": ("float32", "partitioned", float_values(ID_W, (W_ROWS, W_COLS), np.float32)),
    "w_cols": ("int64", "partitioned", int_values(ID_W_COLS, (WC_ROWS, WC_COLS))),
    "bias": ("float32", "replicated", float_values(ID_BIAS, (7,), np.float32)),
    "global_step": ("int64", "replicated", int_values(ID_GLOBAL_STEP, ())),
    "empty": ("float32", "full", np.zeros((0, 3), dtype=np.float32)),
    "rng": ("uint64", "component", rng_values(0)),
}
for r in range(NRANKS):
    expected[f"full_r{r}"] = ("float64", "full", float_values(ID_FULL0 + r, (3, 4), np.float64))
    expected[f"loader/rank_{r}"] = ("uint8", "blob", blob_values(r))
    if r > 0:
        expected[f"rng/parallel_component_{r}"] = ("uint64", "component", rng_values(r))


def attr_str(ds, key):
    v = ds.attrs.get(key)
    return v.decode() if isinstance(v, bytes) else v


def identical(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))


def first_diffs(got, want, n=5):
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    idx = np.argwhere(got != want)[:n]
    return "; ".join(f"{tuple(i)}: {got[tuple(i)]!r} != {want[tuple(i)]!r}" for i in idx)


p = subprocess.run([CLI, "inspect", "--json", PREFIX], capture_output=True)
if p.returncode != 0 or b"Sanitizer" in p.stderr:
    sys.exit(f"mpickpt inspect --json {PREFIX} failed ({p.returncode}): {p.stderr.decode()}")
doc = json.loads(p.stdout)

check(doc["layout"] == "shared", f"layout {doc['layout']}, want shared")
check(doc["world_size"] == NRANKS, f"world_size {doc['world_size']}, want {NRANKS}")
check(doc["step"] == STEP, f"step {doc['step']}, want {STEP}")
tensors = {t["name"]: t for t in doc["tensors"]}
check(set(tensors) == set(expected),
      f"tensors: extra {sorted(set(tensors) - set(expected))}, "
      f"missing {sorted(set(expected) - set(tensors))}")
files = {pc["file"] for t in doc["tensors"] for pc in t["pieces"]}
check(files == {DATA}, f"shared layout: pieces in files {sorted(files)}, want only {DATA}")

path = os.path.join(DIR, DATA)
if not check(os.path.exists(path), f"{path} does not exist"):
    finish(lambda c, f: f"test_shared_h5py: stopped, no data file ({c} checks, {f} failed)")
with h5py.File(path, "r") as f:
    # "w" and "w_cols": one dataset holding the assembled global tensor.
    for name, spec in (("w", f"{W_ROWS} {W_COLS} -:-"), ("w_cols", f"{WC_ROWS} {WC_COLS} -:-")):
        if not check(name in tensors, f"{name}: not in the index"):
            continue
        t = tensors[name]
        dtype, kind, want = expected[name]
        check(t["kind"] == kind, f"{name}: kind {t['kind']}, want {kind}")
        check(len(t["pieces"]) == NRANKS, f"{name}: {len(t['pieces'])} pieces, want {NRANKS}")
        dsets = {pc["dataset"] for pc in t["pieces"]}
        if not check(len(dsets) == 1, f"{name}: pieces in several datasets {sorted(dsets)}"):
            continue
        for pc in t["pieces"]:
            check(pc["dataset_start"] == pc["start"],
                  f"{name}: piece of rank {pc['rank']}: dataset_start {pc['dataset_start']} != "
                  f"start {pc['start']}")
        dsname = dsets.pop()
        if not check(dsname in f, f"{name}: dataset {dsname} not in {path}"):
            continue
        ds = f[dsname]
        check(ds.shape == want.shape, f"{name}: dataset shape {ds.shape}, want {want.shape}")
        check(ds.dtype == np.dtype(dtype), f"{name}: dataset dtype {ds.dtype}, want {dtype}")
        check(ds.id.get_type().get_order() == h5py.h5t.ORDER_LE, f"{name}: not little-endian")
        check(ds.chunks is None and ds.compression is None,
              f"{name}: chunked/filtered ({ds.chunks}, {ds.compression})")
        if ds.shape == want.shape:
            got = ds[...]
            check(identical(got, want), f"{name}: values differ: {first_diffs(got, want)}")
        check(attr_str(ds, "mpickpt.name") == name,
              f"{name}: mpickpt.name = {attr_str(ds, 'mpickpt.name')!r}")
        check(attr_str(ds, "mpickpt.dtype") == dtype,
              f"{name}: mpickpt.dtype = {attr_str(ds, 'mpickpt.dtype')!r}")
        check(attr_str(ds, "mpickpt.slice") == spec,
              f"{name}: mpickpt.slice = {attr_str(ds, 'mpickpt.slice')!r}, want {spec!r}")

    # Every tensor, assembled from its pieces through h5py.
    for name, t in tensors.items():
        if name not in expected:
            continue
        dtype, kind, want = expected[name]
        check(t["dtype"] == dtype, f"{name}: dtype {t['dtype']}, want {dtype}")
        check(t["kind"] == kind, f"{name}: kind {t['kind']}, want {kind}")
        check(tuple(t["shape"]) == want.shape, f"{name}: shape {t['shape']}, want {want.shape}")
        if tuple(t["shape"]) != want.shape:
            continue
        whole = np.zeros(want.shape, dtype=want.dtype)
        covered = np.zeros(want.shape, dtype=np.int64)
        for pc in t["pieces"]:
            if not check(pc["dataset"] in f, f"{name}: dataset {pc['dataset']} missing"):
                continue
            ds = f[pc["dataset"]]
            check(ds.dtype == np.dtype(dtype), f"{name}: {pc['dataset']} is {ds.dtype}")
            check(attr_str(ds, "mpickpt.name") == name,
                  f"{name}: {pc['dataset']} mpickpt.name = {attr_str(ds, 'mpickpt.name')!r}")
            if not want.shape:
                whole[()] = ds[()]
                covered[()] += 1
                continue
            src = tuple(slice(s, s + c) for s, c in zip(pc["dataset_start"], pc["count"]))
            dst = tuple(slice(s, s + c) for s, c in zip(pc["start"], pc["count"]))
            whole[dst] = ds[src]
            covered[dst] += 1
        check(bool(np.all(covered == 1)), f"{name}: pieces do not tile the tensor exactly")
        check(identical(whole, want), f"{name}: values differ: {first_diffs(whole, want)}")

# h5dump parses the file too.
p = subprocess.run(["/usr/bin/h5dump", "-H", path], capture_output=True, text=True)
check(p.returncode == 0, f"h5dump -H {path}: exit {p.returncode}: {p.stderr[:2000]}")
check(len(re.findall(r'DATASET "', p.stdout)) >= 1, "h5dump lists no dataset")

finish(lambda c, f: f"test_shared_h5py: {len(tensors)} tensors, {c} checks, {f} failed")
