#!/usr/bin/python3
"""The checks of test_h5_foreign.sh: a checkpoint read with h5py and h5dump, compared with mpickpt.

    /usr/bin/python3 -B test_h5_foreign_checks.py PREFIX WANT_PACKED

WANT_PACKED is 1 when the checkpoint must hold packed and unpacked pieces. Environment: MPICKPT_CLI.
"""
import json
import os
import re
import subprocess
import sys

import h5py
import numpy as np

from scriptcheck import check, finish

CLI = os.environ["MPICKPT_CLI"]
PREFIX = sys.argv[1]
WANT_PACKED = sys.argv[2] == "1"
DIR = os.path.dirname(PREFIX)


def cli_json(*args):
    p = subprocess.run([CLI, *args], capture_output=True)
    if p.returncode != 0 or "Sanitizer" in p.stderr.decode():
        sys.exit(f"mpickpt {args!r} failed ({p.returncode}): {p.stderr.decode()}")
    return json.loads(p.stdout)


# bfloat16 has no numpy type: h5py widens it to float32, which holds every bfloat16 exactly.
NUMPY = {"bfloat16": np.float32}
SPECIAL = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def dumped_array(d):
    """`mpickpt dump --json` output as a numpy array of the tensor's type (floats exact)."""
    dt = np.dtype(NUMPY.get(d["dtype"], d["dtype"]))
    vals = [SPECIAL.get(v, v) if isinstance(v, str) else v for v in d["values"]]
    if dt.kind == "f":
        a = np.array(vals, dtype=np.float64).astype(dt)
    else:
        a = np.array(vals, dtype=dt)  # Python ints and bools convert exactly
    return a.reshape(d["shape"])


def identical(a, b):
    """Same shape and dtype, bit-identical values except that any NaN matches any NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    nan = np.isnan(a)
    if not np.array_equal(nan, np.isnan(b)):
        return False
    ub = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a[~nan].view(ub), b[~nan].view(ub)))


def packed_block(name, dtype, ds, p):
    """A packed piece: its bytes, little-endian row-major, at pack_offset of a 1-D uint8 dataset."""
    off, n = p["pack_offset"], p["bytes"]
    if not check(ds.dtype == np.uint8 and len(ds.shape) == 1 and off + n <= ds.shape[0],
                 f"{name}: pack {p['dataset']} of {ds.dtype} {ds.shape} cannot hold {off}+{n}"):
        return None
    raw = ds[off:off + n].tobytes()
    if dtype == "bfloat16":  # the upper half of a float32
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype == "bool":
        a = np.frombuffer(raw, dtype=np.uint8).astype(np.bool_)
    else:
        a = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(np.dtype(dtype))
    return a.reshape(p["count"])


def check_type(name, dtype, ds):
    t = ds.id.get_type()
    if dtype == "bfloat16":
        # An IEEE-style 16-bit float with bfloat16's fields: sign bit 15, 8 exponent bits at 7,
        # 7 mantissa bits at 0.
        ok = (isinstance(t, h5py.h5t.TypeFloatID) and t.get_size() == 2 and
              t.get_fields() == (15, 7, 8, 0, 7) and t.get_ebias() == 127)
        check(ok, f"{name}: bfloat16 stored as {t} fields "
                  f"{t.get_fields() if isinstance(t, h5py.h5t.TypeFloatID) else None}")
    else:
        check(ds.dtype.name == dtype, f"{name}: h5py sees {ds.dtype}, index says {dtype}")
    if isinstance(t, h5py.h5t.TypeEnumID):  # h5py's bool is an enum over an integer type
        t = t.get_super()
    check(t.get_size() == 1 or t.get_order() == h5py.h5t.ORDER_LE, f"{name}: stored big-endian")


doc = cli_json("inspect", "--json", PREFIX)
used = set()  # (file, dataset) referenced by the index
files = {}
packs = {}  # (file, pack dataset) -> [(offset, bytes)]
npacked = nplain = 0
try:
    for t in doc["tensors"]:
        name, dtype, shape = t["name"], t["dtype"], tuple(t["shape"])
        dumped = dumped_array(cli_json("dump", "--json", PREFIX, name))
        whole = np.zeros(shape, dtype=dumped.dtype)
        covered = np.zeros(shape, dtype=np.int64)
        for p in t["pieces"]:
            path = os.path.join(DIR, p["file"])
            if path not in files:
                files[path] = h5py.File(path, "r")
            used.add((path, p["dataset"]))
            ds = files[path][p["dataset"]]
            if p["packed"]:
                npacked += 1
                check(p["dataset"].startswith("/packs/"), f"{name}: pack {p['dataset']}")
                packs.setdefault((path, p["dataset"]), []).append((p["pack_offset"], p["bytes"]))
                block = packed_block(name, dtype, ds, p)
                if block is not None:
                    dst = tuple(slice(s, s + c) for s, c in zip(p["start"], p["count"]))
                    whole[dst] = block
                    covered[dst] += 1
                continue
            nplain += 1
            check_type(name, dtype, ds)
            if "mpickpt.name" in ds.attrs:
                attr = ds.attrs["mpickpt.name"]
                attr = attr.decode() if isinstance(attr, bytes) else attr
                check(attr == name, f"{name}: mpickpt.name attribute {attr!r}")
            ds_start, start, count = p["dataset_start"], p["start"], p["count"]
            fits = len(ds.shape) == len(shape) and all(
                s + c <= n for s, c, n in zip(ds_start, count, ds.shape))
            if not check(fits, f"{name}: piece {p} outside dataset of shape {ds.shape}"):
                continue
            src = tuple(slice(s, s + c) for s, c in zip(ds_start, count))
            dst = tuple(slice(s, s + c) for s, c in zip(start, count))
            block = ds[src] if shape else ds[()]
            whole[dst] = block
            covered[dst] += 1
        check(bool(np.all(covered == 1)), f"{name}: pieces do not tile the shape exactly")
        check(identical(whole, dumped),
              f"{name}: h5py and mpickpt dump disagree\nh5py: {whole.ravel()[:20]}\n"
              f"dump: {dumped.ravel()[:20]}")
    # The packed ranges of a pack never overlap, and they fill it exactly.
    for (path, dname), ranges in packs.items():
        ranges.sort()
        end = 0
        for off, n in ranges:
            check(off == end, f"{path}:{dname}: packed range at {off}, expected {end}")
            end = off + n
        check(end == files[path][dname].shape[0], f"{path}:{dname}: ranges end at {end}")
finally:
    for f in files.values():
        f.close()
if WANT_PACKED:
    check(npacked > 0 and nplain > 0, f"wanted packed and unpacked pieces: {npacked}, {nplain}")
else:
    check(npacked == 0, f"single-process writer packed {npacked} pieces")

# h5dump: the reference tool parses every file and lists every dataset the index names, and
# the index names every dataset under /tensors (no orphans).
for path in sorted({f for f, _ in used}):
    p = subprocess.run(["/usr/bin/h5dump", "-H", path], capture_output=True, text=True)
    check(p.returncode == 0, f"h5dump -H {path}: exit {p.returncode}: {p.stderr[:2000]}")
    seen, stack = set(), []
    for line in p.stdout.splitlines():
        m = re.fullmatch(r'\s*(GROUP|DATASET) "(.*)" \{\s*', line)
        if m:
            stack.append(m.group(2))
            if m.group(1) == "DATASET":
                # The root group is GROUP "/"; other '{' (HDF5 "file", attributes) push None.
                seen.add("/" + "/".join(x for x in stack if x not in (None, "/")))
            continue
        for ch in line:
            if ch == "{":
                stack.append(None)
            elif ch == "}" and stack:
                stack.pop()
    want = {d for f, d in used if f == path}
    check(want <= seen, f"h5dump -H {path} lacks {sorted(want - seen)}")
    orphans = {d for d in seen if d.startswith(("/tensors/", "/packs/"))} - want
    check(not orphans, f"{path}: datasets no tensor refers to: {sorted(orphans)}")

finish(lambda c, f: f"test_h5_foreign: {len(doc['tensors'])} tensors, {c} checks, {f} failed")
