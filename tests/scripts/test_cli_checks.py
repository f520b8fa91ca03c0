#!/usr/bin/python3
"""The checks of test_cli.sh, which runs them after make_ckpt wrote OUTDIR/good/ckpt-7:

    /usr/bin/python3 -B test_cli_checks.py OUTDIR

Environment: MPICKPT_CLI, MPICKPT_MAKE_CKPT, and MPICKPT_TEST_T0 / MPICKPT_TEST_T1 (the clock
before and after make_ckpt).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from scriptcheck import check, flip_piece_byte, run_cli, finish

CLI = os.environ["MPICKPT_CLI"]
MAKE = os.environ["MPICKPT_MAKE_CKPT"]
OUT = sys.argv[1]
GOOD = os.path.join(OUT, "good", "ckpt-7")
KERNEL = "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"
WEIRD = 'weird "name" \\ 100% /\u00e9'
CTRL = "ctrl/tab\there\nnewline\x01\x1f\x7f"


def run(*args, rc=None):
    return run_cli(CLI, *args, rc=rc)


# ---- expected contents: keep in sync with tests/unit/make_ckpt.c ----

def f32(x):
    return np.float32(x)


def float32_values():
    v = [f32(i - 10) / f32(3) for i in range(24)]
    v[3], v[4], v[5] = np.nan, np.inf, -np.inf
    return np.array(v, dtype=np.float32)


def float64_values():
    v = [(i - 10) / 3.0 for i in range(24)]
    v[23] = 5e-324
    return np.array(v, dtype=np.float64)


K = 0x1111111111111111
bits16 = np.arange(65536, dtype=np.uint32)
# name: (dtype, shape, kind, values as an exact numpy array or list of Python ints/bools)
EXPECTED = {
    "dtype/float16": ("float16", [3, 5], np.array([(i - 7) * 0.5 for i in range(15)], np.float16)),
    "dtype/bfloat16": ("bfloat16", [3, 5],
                       np.array([(i - 7) * 0.25 for i in range(15)], np.float32)),
    "dtype/float32": ("float32", [4, 6], float32_values()),
    "dtype/float64": ("float64", [2, 3, 4], float64_values()),
    "dtype/int8": ("int8", [16], [-128 + 17 * i for i in range(16)]),
    "dtype/int16": ("int16", [4, 4], [-32768 + 4369 * i for i in range(16)]),
    "dtype/int32": ("int32", [2, 8], [-2**31 + 286331153 * i for i in range(16)]),
    "dtype/int64": ("int64", [2, 2, 4], [-2**63 + K * i for i in range(16)]),
    "dtype/uint8": ("uint8", [16], [17 * i for i in range(16)]),
    "dtype/uint16": ("uint16", [4, 4], [4369 * i for i in range(16)]),
    "dtype/uint32": ("uint32", [2, 8], [286331153 * i for i in range(16)]),
    "dtype/uint64": ("uint64", [16], [K * i for i in range(16)]),
    "dtype/bool": ("bool", [7], [i % 3 == 0 for i in range(7)]),
    "bits/float16": ("float16", [256, 256], bits16.astype(np.uint16).view(np.float16)),
    "bits/bfloat16": ("bfloat16", [256, 256], (bits16 << 16).view(np.float32)),
    "scalar/pi": ("float64", [], np.array([3.141592653589793])),
    "empty/float32": ("float32", [3, 0, 2], np.zeros(0, np.float32)),
    KERNEL: ("float32", [6, 4], np.arange(24, dtype=np.float32) + np.float32(0.5)),
    "partitioned/cols": ("int16", [3, 8], [i - 12 for i in range(24)]),
    WEIRD: ("int32", [3], [0, -1000, -2000]),
    CTRL: ("int8", [2], [1, -1]),
}
PIECES = {  # partitioned tensors: set of (start, count)
    KERNEL: {((0, 0), (2, 4)), ((2, 0), (2, 4)), ((4, 0), (2, 4))},
    "partitioned/cols": {((0, 0), (3, 3)), ((0, 3), (3, 5))},
}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2,
            "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1}
FLOAT_NP = {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32,
            "float64": np.float64}
SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def same_values(dtype, got, want):
    """Exact comparison: integers as Python ints, floats bit for bit (any NaN matches NaN)."""
    if dtype not in FLOAT_NP:
        if dtype == "bool":
            return all(type(g) is bool for g in got) and got == list(want)
        return all(type(g) is int for g in got) and got == list(want)
    if any(isinstance(g, str) and g not in SPECIAL for g in got):
        return False
    ft = FLOAT_NP[dtype]
    g = np.array([SPECIAL.get(x, x) if isinstance(x, str) else x for x in got],
                 dtype=np.float64).astype(ft)
    w = np.asarray(want).astype(ft).ravel()
    if g.shape != w.shape or not np.array_equal(np.isnan(g), np.isnan(w)):
        return False
    ub = {2: np.uint16, 4: np.uint32, 8: np.uint64}[g.itemsize]
    ok = ~np.isnan(w)
    return bool(np.array_equal(g[ok].view(ub), w[ok].view(ub)))


def sub_block(values, shape, start, count):
    a = np.asarray(values, dtype=object).reshape(shape)
    return list(a[tuple(slice(s, s + c) for s, c in zip(start, count))].ravel())


def crc32c(data, _table=[]):
    if not _table:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = _table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def typed(dtype, values):
    """The expected values as a little-endian numpy array of the stored element type."""
    if dtype == "bfloat16":
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype("<u2")
    if isinstance(values, np.ndarray):
        return values.astype(values.dtype.newbyteorder("<"))
    return np.array(values, dtype=np.dtype({"bool": "u1"}.get(dtype, dtype)).newbyteorder("<"))


def piece_bytes(dtype, values, shape, start, count):
    """Little-endian row-major bytes of a piece, recomputed from the expected values."""
    a = typed(dtype, values).reshape(shape)
    return a[tuple(slice(s, s + c) for s, c in zip(start, count))].tobytes()


# ---- inspect ----
rc, raw_inspect, se = run("inspect", "--json", GOOD, rc=0)
doc = json.loads(raw_inspect)
check(list(doc) == ["format_version", "world_size", "layout", "save_counter", "epoch", "step",
                    "timestamp", "producer", "tensors"], f"inspect keys: {list(doc)}")
check(doc["format_version"] == 1, "format_version")
check(doc["world_size"] == 1, "world_size")
check(doc["layout"] in ("shared", "per-rank"), f"layout {doc['layout']}")
check(doc["save_counter"] == 7 and doc["epoch"] == 3 and doc["step"] == 1234,
      f"counter/epoch/step: {doc['save_counter']} {doc['epoch']} {doc['step']}")
T0, T1 = float(os.environ["MPICKPT_TEST_T0"]), float(os.environ["MPICKPT_TEST_T1"])
check(isinstance(doc["timestamp"], float) and T0 - 1e-3 <= doc["timestamp"] <= T1 + 1e-3,
      f"timestamp {doc['timestamp']!r} is not between {T0} and {T1} (before and after make_ckpt)")
check(re.fullmatch(r"mpickpt \d+\.\d+\.\d+.*", doc["producer"]) is not None, "producer")
names = [t["name"] for t in doc["tensors"]]
check(names == sorted(names, key=lambda n: n.encode()), f"tensors not sorted by name: {names}")
check(set(names) == set(EXPECTED), f"tensor names: {sorted(set(names) ^ set(EXPECTED))}")
TENSORS = {t["name"]: t for t in doc["tensors"]}
for name, t in TENSORS.items():
    if name not in EXPECTED:
        continue
    dtype, shape, values = EXPECTED[name]
    check(t["dtype"] == dtype and t["shape"] == shape, f"{name}: {t['dtype']} {t['shape']}")
    check(list(t) == ["name", "dtype", "shape", "kind", "pieces"], f"{name}: keys {list(t)}")
    want_pieces = PIECES.get(name, {(tuple([0] * len(shape)), tuple(shape))})
    got = {(tuple(p["start"]), tuple(p["count"])) for p in t["pieces"]}
    check(len(t["pieces"]) == len(want_pieces) and got == want_pieces, f"{name}: pieces {got}")
    check(t["kind"] == ("partitioned" if name in PIECES else "full"), f"{name}: kind {t['kind']}")
    for p in t["pieces"]:
        check(list(p) == ["start", "count", "rank", "file", "dataset", "dataset_start", "bytes",
                          "crc32c", "packed", "pack_offset"], f"{name}: piece keys {list(p)}")
        check(p["packed"] is False and p["pack_offset"] == 0,
              f"{name}: the single-process writer packed a piece: {p}")
        check(p["rank"] == 0 and "/" not in p["file"] and p["file"].startswith("ckpt-7.data-")
              and os.path.isfile(os.path.join(OUT, "good", p["file"])), f"{name}: file {p}")
        check(p["dataset"].startswith("/") and len(p["dataset_start"]) == len(shape),
              f"{name}: dataset {p}")
        n = int(np.prod(p["count"], dtype=np.int64))
        check(p["bytes"] == n * ITEMSIZE[dtype], f"{name}: bytes {p['bytes']}")
        raw = piece_bytes(dtype, values, shape, p["start"], p["count"])
        check(isinstance(p["crc32c"], int) and p["crc32c"] == crc32c(raw),
              f"{name}: crc32c {p['crc32c']} != {crc32c(raw)}")

# Exact escaping: '"' and '\\' escaped, control characters as \u00XX, UTF-8 and DEL as is.
check('"name":"weird \\"name\\" \\\\ 100% /\u00e9"' in raw_inspect,
      "JSON escaping of the weird name")
check('"name":"ctrl/tab\\u0009here\\u000anewline\\u0001\\u001f\x7f"' in raw_inspect,
      "JSON escaping of control characters")

rc, so, se = run("inspect", GOOD + ".index", rc=0)  # text form; ".index" suffix accepted
for name in EXPECTED:
    shown = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or c == "\x7f" else c for c in name)
    check(shown + " " in so, f"text inspect lacks {shown!r}")
check("save counter  7" in so, "text inspect header")

# ---- dump: every tensor, exactly the values written ----
for name, (dtype, shape, values) in EXPECTED.items():
    rc, so, se = run("dump", "--json", GOOD, name, rc=0)
    if rc:
        continue
    d = json.loads(so)
    check(list(d) == ["name", "dtype", "shape", "values"], f"dump {name}: keys {list(d)}")
    check(d["name"] == name and d["dtype"] == dtype and d["shape"] == shape,
          f"dump {name}: header {d['name']!r} {d['dtype']} {d['shape']}")
    check(same_values(dtype, d["values"], values),
          f"dump {name}: values differ\n got {d['values'][:40]}\nwant {list(values)[:40]}")
    rc, so, se = run("dump", GOOD, name, rc=0)  # text form
    rows = max(1, int(np.prod(shape[:-1], dtype=np.int64))) if shape else 1
    if int(np.prod(shape, dtype=np.int64)) == 0:
        rows = 0
    check(len(so.splitlines()) == 1 + rows, f"text dump {name}: {len(so.splitlines())} lines")

# Sub-slices: extents only, full TensorFlow spec, "=" form, across two pieces.
kvals = EXPECTED[KERNEL][2]
want = [float(x) for x in sub_block(kvals, [6, 4], [2, 1], [3, 2])]
for args in (["--slice", "2,3:1,2"], ["--slice", "6 4 2,3:1,2"], ["--slice=2,3:1,2"]):
    rc, so, se = run("dump", "--json", *args, GOOD, KERNEL, rc=0)
    if rc == 0:
        d = json.loads(so)
        check(d["shape"] == [3, 2] and d["values"] == want, f"dump {args}: {d}")
rc, so, se = run("dump", "--json", "--slice", "1,2:2,3", GOOD, "partitioned/cols", rc=0)
check(rc == 0 and json.loads(so)["values"] ==
      sub_block(EXPECTED["partitioned/cols"][2], [3, 8], [1, 2], [2, 3]), f"cols slice: {so}")
rc, so, se = run("dump", "--json", "--slice", "-:3,0", GOOD, KERNEL, rc=0)
check(rc == 0 and json.loads(so)["shape"] == [6, 0] and json.loads(so)["values"] == [],
      "empty slice")
rc, so, se = run("dump", "--json", "--slice", "", GOOD, "scalar/pi", rc=0)
check(rc == 0 and json.loads(so)["values"] == [3.141592653589793], "scalar slice")

# ---- help, version, exit codes ----
for args in (["--help"], ["help"], ["-h"], ["help", "dump"], ["dump", "--help"]):
    rc, so, se = run(*args, rc=0)
    check("usage: mpickpt" in so, f"{args}: no usage on stdout")
rc, so, se = run("--version", rc=0)
check(re.fullmatch(r"mpickpt \d+\.\d+\.\d+\S*\n", so) is not None, f"--version: {so!r}")

usage_cases = [
    [], ["frobnicate"], ["inspect"], ["inspect", "--bogus", GOOD], ["inspect", GOOD, GOOD],
    ["dump", "--slice", "0:1", GOOD], ["dump", GOOD, KERNEL, "extra"], ["dump", "--slice"],
    ["verify"],
    ["dump", "--json=1", GOOD, KERNEL], ["help", "frobnicate"],
    ["dump", "--slice", "2,3:x", GOOD, KERNEL],        # bad extent syntax
    ["dump", "--slice", "2,3", GOOD, KERNEL],          # wrong rank
    ["dump", "--slice", "5,3:-", GOOD, KERNEL],        # outside the shape
    ["dump", "--slice", "6 5 0,1:-", GOOD, KERNEL],    # spec for another shape
    ["dump", "--slice", "6 4 0,1", GOOD, KERNEL],      # spec with too few extents
    ["dump", "--slice", "0:1:2", GOOD, KERNEL],        # start:stop:step (no step)
    ["dump", "--slice", "0:1,0:1,0:1", GOOD, KERNEL],  # start:stop for more axes than it has
    ["dump", "--slice", "a:1", GOOD, KERNEL],          # bounds are integers
]
for args in usage_cases:
    rc, so, se = run(*args, rc=2)
    check(se.startswith("mpickpt: " if args else "usage: mpickpt"), f"{args}: stderr {se!r}")
# issue 30: dump PREFIX shows the plain values of the Python package's record (none here)
rc, so, se = run("dump", GOOD, rc=0)
check(so.startswith("no plain values in "), f"dump without NAME: {so!r}")
rc, so, se = run("dump", "--json", GOOD, rc=0)
check(json.loads(so)["replicated"] == {} and json.loads(so)["records"] == [], f"{so!r}")
# start:stop slices, as Python's: open ends, negative from the end, clamped
rc, so, se = run("dump", "--json", "--slice", "1:3,:-1", GOOD, KERNEL, rc=0)
rc2, so2, se2 = run("dump", "--json", "--slice", "1,2:0,3", GOOD, KERNEL, rc=0)
check(json.loads(so)["values"] == json.loads(so2)["values"], f"start:stop {so} vs {so2}")
rc, so, se = run("dump", "--json", "--slice", "-100:100", GOOD, KERNEL, rc=0)
rc2, so2, se2 = run("dump", "--json", GOOD, KERNEL, rc=0)
check(json.loads(so)["values"] == json.loads(so2)["values"], "clamped start:stop")
rc, so, se = run("dump", GOOD, "no/such/tensor", rc=1)
check(se.startswith("mpickpt: dump: ") and "no/such/tensor" in se, f"unknown tensor: {se!r}")
missing = os.path.join(OUT, "nowhere", "ckpt-1")
for cmd in (["inspect"], ["inspect", "--json"], ["verify"]):
    rc, so, se = run(*cmd, missing, rc=1)
    check(se.startswith(f"mpickpt: {cmd[0]}: ") and missing in se, f"{cmd} missing: {se!r}")
rc, so, se = run("dump", missing, KERNEL, rc=1)

# ---- verify ----
rc, so, se = run("verify", GOOD, rc=0)
total = sum(p["bytes"] for t in doc["tensors"] for p in t["pieces"])
npieces = sum(len(t["pieces"]) for t in doc["tensors"])
check(so == f"{GOOD}: ok ({len(names)} tensors, {npieces} pieces, {total} bytes)\n",
      f"verify line {so!r}")
run("verify", GOOD + ".index", rc=0)


def fresh_copy(tag):
    d = os.path.join(OUT, tag)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(OUT, "good"), d)
    return os.path.join(d, "ckpt-7")


# 1. A flipped data byte: verify names the tensor and piece; only that piece's reads fail.
bad = fresh_copy("flip")
j, p = flip_piece_byte(CLI, bad, KERNEL, [2, 0])
rc, so, se = run("verify", bad, rc=1)
check(KERNEL in se and f"piece {j}" in se and p["file"] in se, f"flip: stderr {se!r}")
check(so == f"{bad}: BAD (1 of {npieces} pieces failed)\n", f"flip: stdout {so!r}")
rc, so, se = run("dump", bad, KERNEL, rc=1)
check(se.startswith("mpickpt: dump: ") and KERNEL in se, f"flip dump: {se!r}")
run("dump", "--slice", "0,2:-", bad, KERNEL, rc=0)  # piece 0 is intact
run("dump", bad, "dtype/float32", rc=0)
run("inspect", bad, rc=0)

bad = fresh_copy("flip_weird")
flip_piece_byte(CLI, bad, WEIRD, [0])
rc, so, se = run("verify", bad, rc=1)
check(WEIRD in se, f"flip weird: stderr {se!r}")

# 2. Truncated index: every command fails naming the index.
bad = fresh_copy("trunc_index")
index = bad + ".index"
os.truncate(index, os.path.getsize(index) - 5)
for args in (["verify", bad], ["inspect", bad], ["inspect", "--json", bad], ["dump", bad, KERNEL]):
    rc, so, se = run(*args, rc=1)
    check(index in se, f"truncated index {args[0]}: {se!r}")

# 3. A flipped byte inside the index.
bad = fresh_copy("flip_index")
with open(bad + ".index", "r+b") as f:
    f.seek(os.path.getsize(bad + ".index") // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x01]))
run("verify", bad, rc=1)
run("inspect", bad, rc=1)

# 4. Missing data file.
bad = fresh_copy("no_data")
data = os.path.join(os.path.dirname(bad), TENSORS[KERNEL]["pieces"][0]["file"])
os.unlink(data)
for args in (["verify", bad], ["inspect", bad], ["dump", bad, KERNEL]):
    rc, so, se = run(*args, rc=1)
    check(os.path.basename(data) in se, f"missing data {args[0]}: {se!r}")

# 5. Truncated data file.
bad = fresh_copy("trunc_data")
data = os.path.join(os.path.dirname(bad), TENSORS[KERNEL]["pieces"][0]["file"])
os.truncate(data, os.path.getsize(data) // 2)
for args in (["verify", bad], ["inspect", bad], ["dump", bad, KERNEL]):
    rc, so, se = run(*args, rc=1)
    check(os.path.basename(data) in se, f"truncated data {args[0]}: {se!r}")

# ---- verify DIR: every *.index in DIR and DIR/chief ----
dirs = os.path.join(OUT, "dirs")
os.makedirs(os.path.join(dirs, "chief"))
for pfx, n in (("ckpt-1", 1), ("ckpt-10", 10), ("chief/ckpt-2", 2)):
    subprocess.run([MAKE, os.path.join(dirs, pfx), "--counter", str(n)], check=True)
os.makedirs(os.path.join(dirs, "ckpt-3_temp"))  # debris that is not a checkpoint
rc, so, se = run("verify", dirs, rc=0)
lines = so.splitlines()
check(len(lines) == 3 and all(": ok (" in l for l in lines), f"verify dir: {so!r}")
check([l.split(":")[0] for l in lines] == [os.path.join(dirs, x) for x in
                                           ("ckpt-1", "ckpt-10", "chief/ckpt-2")],
      f"verify dir order: {lines}")
rc, so, se = run("verify", dirs + "/", GOOD, rc=0)
check(len(so.splitlines()) == 4, f"verify several: {so!r}")
flip_piece_byte(CLI, os.path.join(dirs, "chief", "ckpt-2"), "dtype/int64", [0, 0, 0])
rc, so, se = run("verify", dirs, rc=1)
check(so.count(": ok (") == 2 and so.count(": BAD (") == 1 and "chief/ckpt-2: BAD" in so,
      f"verify dir with a bad one: {so!r}")
check("dtype/int64" in se, f"verify dir stderr: {se!r}")
empty = os.path.join(OUT, "empty")
os.makedirs(empty)
rc, so, se = run("verify", empty, rc=1)
check(empty in se, f"verify empty dir: {se!r}")

finish(lambda c, f: f"test_cli: {c} checks, {f} failed")
