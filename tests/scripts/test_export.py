#!/usr/bin/python3
"""`mpickpt export --format hdf5|safetensors` (issue 18, docs/interop.md), read back by readers
that are not ours:

    /usr/bin/python3 -B test_export.py OUTDIR h5py|safetensors|bad
    /usr/bin/python3 -B test_export.py OUTDIR mpi LAYOUT NP
    mpirun -np NP /usr/bin/python3 -B test_export.py DIR write LAYOUT      (the writer of `mpi`)

Environment: MPICKPT_CLI, MPICKPT_MAKE_CKPT, MPIEXEC, PYTHONPATH (the built Python package);
MPICKPT_ASAN_PRELOAD in sanitizer builds (libasan, which the Python extension needs).

h5py, safetensors: make_ckpt's checkpoint (every dtype, every float16 and bfloat16 bit pattern,
a scalar, a zero-size tensor, nested and odd names, partitioned tensors) exported; every HDF5
dataset read with h5py, every safetensors tensor with the reader below (written from the format's
description only), equals `mpickpt dump --json` of the tensor and, bit for bit,
mpickpt.open(prefix)'s read; the header's epoch, step and save_counter are the HDF5 file's
attributes and the safetensors file's __metadata__.
mpi: a checkpoint written by NP ranks through the Python package (mpirun, LAYOUT shared,
per-rank or per-node with nodes of 2 ranks; small pieces packed into /packs with
MPICKPT_PACK_BYTES=256): the 13 dtypes partitioned by rows over the ranks, with NaN, infinities,
-0.0 and subnormals, a scalar, a zero-size tensor, a nested TensorFlow-style name, PerRank
components and the package's JSON record; both exports equal the values the writer computed, dump
and mpickpt.open.
bad: an existing OUT without --force (exit 1, unchanged), OUT a symbolic link, a dangling link, a
FIFO or a directory (refused with --force too; nothing written through the link), a flipped data
byte (the tensor named), names HDF5 cannot hold (both tensors named), a tensor named
"__metadata__" for safetensors, a read-only and a full output directory; after every failure
no OUT and no temp file (*.tmp-*).
"""
import glob
import hashlib
import json
import os
import re
import stat
import struct
import subprocess
import sys

import numpy as np


def _asan_reexec():
    """Sanitizer builds: the Python extension needs libasan preloaded (leak checks off in this
    interpreter); the CLI runs keep the build's own ASAN_OPTIONS."""
    pre = os.environ.get("MPICKPT_ASAN_PRELOAD")
    if not pre:
        return
    if os.environ.get("LD_PRELOAD") != pre:
        env = dict(os.environ, LD_PRELOAD=pre,
                   MPICKPT_CLI_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""),
                   ASAN_OPTIONS="detect_leaks=0:strict_string_checks=1")
        os.execve(sys.executable, [sys.executable, "-B"] + sys.argv, env)
    os.environ.pop("LD_PRELOAD")
    os.environ["ASAN_OPTIONS"] = os.environ.get("MPICKPT_CLI_ASAN_OPTIONS", "")


if len(sys.argv) > 2 and sys.argv[2] not in ("write", "write-long"):
    _asan_reexec()

OUT = sys.argv[1]
MODE = sys.argv[2]

EPOCH, STEP = 6, 4321
NUMPY_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                "uint16", "uint32", "uint64", "bool"]
ALL_DTYPES = NUMPY_DTYPES + ["bfloat16"]
KERNEL = "model/layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"


# ---- the values of the mpi case: a function of the global index only ----------------------------

def global_values(dtype, shape):
    """The writer's global tensor of `dtype` (bfloat16: its bits as uint16) and `shape`. Floats
    start with NaN, +inf, -inf, -0.0 and the smallest subnormal."""
    n = int(np.prod(shape, dtype=np.int64))
    flat = np.arange(n, dtype=np.int64)
    if dtype == "bool":
        return (flat % 3 == 0).reshape(shape)
    if dtype in ("float16", "float32", "float64", "bfloat16"):
        v = (flat - 7) * 0.25
        tiny = {"float16": 2.0 ** -24, "float32": 2.0 ** -149, "float64": 5e-324,
                "bfloat16": 2.0 ** -133}[dtype]
        special = [np.nan, np.inf, -np.inf, -0.0, tiny]
        v[:min(n, 5)] = special[:min(n, 5)]
        if dtype == "bfloat16":  # the upper half of a float32: exact for these values
            return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).reshape(shape)
        return v.astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    v = (flat * 37 - 50).astype(dtype)  # wraps for the unsigned types: any bits will do
    v[:min(n, 2)] = [info.min, info.max][:min(n, 2)]
    return v.reshape(shape)


def rows_of(rank, size, rows):
    return rank * rows // size, (rank + 1) * rows // size


def write(directory, layout):
    """The writer of the mpi case (under mpirun): a CheckpointManager save of shards of every
    dtype, a nested name, a scalar, a zero-size array, a PerRank array and plain values."""
    from mpi4py import MPI

    import mpickpt
    import torch

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    rows = 2 * size + 3
    lo, hi = rows_of(rank, size, rows)

    def shard(dtype, cols):
        g = global_values(dtype, (rows, cols))
        local = np.ascontiguousarray(g[lo:hi])
        if dtype == "bfloat16":
            local = torch.from_numpy(local.view(np.int16).copy()).view(torch.bfloat16)
        return mpickpt.Shard(local, (rows, cols), (lo, 0))

    state = {
        "dtypes": {d: shard(d, 3) for d in ALL_DTYPES},
        "model": {"layer": {"kernel": {".ATTRIBUTES": {"VARIABLE_VALUE": shard("float32", 5)}}}},
        "big": shard("float64", 64),  # 512 bytes a row: over the pack limit of 256
        "scalar": np.array(2.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "note": "plain values go to the JSON record",
    }
    mgr = mpickpt.CheckpointManager(directory, layout=layout)
    mgr.save(STEP, state, epoch=EPOCH)
    # ckpt-2: with a PerRank array, stored as "per_rank" (rank 0) and, on more ranks,
    # "per_rank/parallel_component_<r>": names an HDF5 file cannot hold side by side
    state["per_rank"] = mpickpt.PerRank(np.full(3, rank, dtype=np.int32))
    mgr.save(STEP + 1, state, epoch=EPOCH)
    mgr.close()


def write_long(directory):
    """The writer of the header-limit case (under mpirun): LONG_NAMES tensors of 4096-byte
    names, each byte a control character (a 6-byte JSON escape), replicated, so packed: the
    index holds the names, HDF5 does not."""
    import mpickpt

    state = {long_name(j): np.array([j, -j], dtype=np.int32) for j in range(1, LONG_NAMES + 1)}
    mgr = mpickpt.CheckpointManager(directory, layout="per-rank")
    mgr.save(1, state)
    mgr.close()


LONG_NAMES = 4200  # x ~24.6 KB of header each: ~103 MB, over safetensors' 100,000,000 bytes


def long_name(j):
    return "\x01" * 4090 + "%06d" % j


if MODE == "write":
    write(OUT, sys.argv[3])
    sys.exit(0)
if MODE == "write-long":
    write_long(OUT)
    sys.exit(0)

# ---- the checks ----------------------------------------------------------------------------------

import h5py  # noqa: E402 - not needed by the writer

import mpickpt  # noqa: E402
from mpickpt._tree import CODE_NAMES, CODE_NUMPY  # noqa: E402
from scriptcheck import check, finish, flip_piece_byte, run_cli  # noqa: E402

CLI = os.environ["MPICKPT_CLI"]

# numpy dtype of each of our dtypes in an export (bfloat16: its bits)
EXPORT_NUMPY = {name: np.dtype(name).newbyteorder("<") if name != "bool" else np.dtype(np.bool_)
                for name in NUMPY_DTYPES}
EXPORT_NUMPY["bfloat16"] = np.dtype("<u2")
# safetensors' dtype codes, from the format's description
ST_CODES = {"BOOL": np.dtype(np.bool_), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
            "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "F16": np.dtype("<f2"),
            "BF16": np.dtype("<u2"), "I32": np.dtype("<i4"), "U32": np.dtype("<u4"),
            "F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8"),
            "U64": np.dtype("<u8")}
ST_OF = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
         "float16": "F16", "bfloat16": "BF16", "int32": "I32", "uint32": "U32",
         "float32": "F32", "float64": "F64", "int64": "I64", "uint64": "U64"}


def cli(*args, rc=None):
    return run_cli(CLI, *args, rc=rc)


# `mpickpt inspect --json` and `dump --json` of a checkpoint, run once per content of its files:
# every export is compared with them, and the same bytes give the same output (the sweeps of
# full_disks compare ~30 exports of one checkpoint, ~600 runs of dump: most of this test's time,
# and 5x more under the sanitizers). Keyed by the bytes, a checkpoint rewritten or damaged in
# place is read afresh; a failed run is not kept.
_READS = {}


def checkpoint_bytes(prefix):
    """A digest of the checkpoint's files (the regular files named PREFIX.*)."""
    d, base = os.path.split(prefix)
    h = hashlib.sha256()
    for n in sorted(os.listdir(d or ".")):
        path = os.path.join(d, n)
        if n.startswith(base + ".") and stat.S_ISREG(os.lstat(path).st_mode):
            h.update(n.encode() + b"\0" + file_bytes(path) + b"\0")
    return h.digest()


def cli_read(*args):
    """cli(*args, rc=0)'s stdout (args: inspect|dump, --json, the checkpoint's prefix, perhaps a
    tensor name), from an earlier run on the same bytes when there was one."""
    prefix = args[2]
    key = (args, checkpoint_bytes(prefix))
    if key not in _READS:
        code, so, se = cli(*args, rc=0)
        if code != 0 or "Sanitizer" in se or "runtime error" in se:
            return so
        _READS[key] = so
    return _READS[key]


def inspect(prefix):
    return json.loads(cli_read("inspect", "--json", prefix))


def bits(a):
    """Bytes of an array, booleans as their 0/1 bytes: equal exactly when the values are bit for
    bit the same."""
    return np.ascontiguousarray(a).tobytes()


def as_float(a, dtype):
    """Values as float64 (bfloat16 from its bits)."""
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def equals_dump(prefix, name, dtype, got, what):
    """`got` (a tensor read from an export) equals `mpickpt dump --json PREFIX NAME`."""
    doc = json.loads(cli_read("dump", "--json", prefix, name))
    vals = doc["values"]
    if not check(doc["dtype"] == dtype and tuple(doc["shape"]) == got.shape,
                 f"{what}: dump says {doc['dtype']}{doc['shape']}, the export {dtype}{got.shape}"):
        return
    flat = got.reshape(-1)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        want = np.array([float(v) if not isinstance(v, str) else
                         {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[v]
                         for v in vals], dtype=np.float64)
        have = as_float(flat, dtype)
        if dtype != "float64":  # dump prints 9 significant digits: exact in float32
            want, have = want.astype(np.float32), have.astype(np.float32)
        ok = np.array_equal(np.isnan(want), np.isnan(have)) and np.array_equal(
            want[~np.isnan(want)], have[~np.isnan(have)]) and np.array_equal(
            np.signbit(want[~np.isnan(want)]), np.signbit(have[~np.isnan(have)]))
    elif dtype == "bool":
        ok = flat.tolist() == [bool(v) for v in vals]
    else:
        ok = [int(v) for v in flat.tolist()] == [int(v) for v in vals]
    check(ok, f"{what}: values differ from mpickpt dump: {flat[:8]} vs {vals[:8]}")


def reader_values(prefix, tensors):
    """Every tensor of prefix read with mpickpt.open() (names the package keeps for itself,
    which open() hides, through its reader), by name."""
    out = {}
    with mpickpt.open(prefix) as ck:
        codes = {t["name"]: t["dtype"] for t in ck._r.tensors()}
        for t in tensors:
            name = t["name"]
            if name in ck:
                out[name] = ck[name].read()
            else:
                a = np.empty(t["shape"], dtype=CODE_NUMPY[codes[name]])
                ck._r.read(name, a, codes[name])
                out[name] = a
            check(CODE_NAMES[codes[name]] == t["dtype"], f"{name}: dtype")
    return out


def check_hdf5(prefix, path, expected=None):
    """The HDF5 export of prefix at path, read with h5py."""
    ins = inspect(prefix)
    tensors = ins["tensors"]
    ref = reader_values(prefix, tensors)
    with h5py.File(path, "r") as f:
        a = f.attrs
        for k in ("epoch", "step", "save_counter"):
            check(a.get(k) == ins[k] and a[k].dtype == np.int64,
                  f"{path}: attribute {k} = {a.get(k)!r}, the header says {ins[k]}")
        check(a.get("end_of_epoch") in (0, 1), f"{path}: end_of_epoch {a.get('end_of_epoch')!r}")
        check(a.get("format") == "mpickpt-export", f"{path}: format {a.get('format')!r}")
        check(a.get("producer") == ins["producer"], f"{path}: producer {a.get('producer')!r}")
        check(a.get("source") == prefix, f"{path}: source {a.get('source')!r}")
        found = []
        f.visititems(lambda n, o: found.append(n) if isinstance(o, h5py.Dataset) else None)
        check(sorted(found) == sorted(t["name"] for t in tensors),
              f"{path}: datasets {sorted(found)[:10]}..., tensors "
              f"{sorted(t['name'] for t in tensors)[:10]}...")
        for t in tensors:
            name, dtype = t["name"], t["dtype"]
            what = f"{path}:{name!r}"
            obj = f.get(name)
            if not check(isinstance(obj, h5py.Dataset), f"{what}: not a dataset ({obj!r})"):
                continue
            check(obj.shape == tuple(t["shape"]), f"{what}: shape {obj.shape}, {t['shape']}")
            check(obj.dtype == EXPORT_NUMPY[dtype],
                  f"{what}: dtype {obj.dtype}, expected {EXPORT_NUMPY[dtype]}")
            check(obj.attrs.get("dtype") == dtype, f"{what}: attr dtype {obj.attrs.get('dtype')!r}")
            plist = obj.id.get_create_plist()
            check(plist.get_layout() == h5py.h5d.CONTIGUOUS and plist.get_nfilters() == 0,
                  f"{what}: not contiguous and unfiltered")
            got = np.asarray(obj[()])
            check(got.shape == tuple(t["shape"]), f"{what}: read shape {got.shape}")
            check(bits(got) == bits(ref[name]) and got.dtype.itemsize == ref[name].dtype.itemsize,
                  f"{what}: differs from mpickpt.open's read")
            if expected is not None and name in expected:
                check(bits(got) == bits(expected[name]), f"{what}: differs from the writer's")
            equals_dump(prefix, name, dtype, got, what)
    return len(tensors)


def read_safetensors(path):
    """A reader from the format's description: u64 little-endian N, N bytes of JSON (padded with
    spaces), then the data; every tensor's data_offsets relative to the data, contiguous, in
    bounds, each the size its dtype and shape say. Returns (metadata, {name: array}, names in
    header order)."""
    with open(path, "rb") as fh:
        raw = fh.read()
    check(len(raw) >= 8, f"{path}: {len(raw)} bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    check(8 + n <= len(raw), f"{path}: header length {n} past the end ({len(raw)} bytes)")
    check(n % 8 == 0, f"{path}: header length {n} is not a multiple of 8")
    text = raw[8:8 + n].decode("utf-8")
    check(text.startswith("{"), f"{path}: header starts {text[:10]!r}")
    check(text == text.rstrip(" ") + " " * (len(text) - len(text.rstrip(" "))) and
          len(text) - len(text.rstrip(" ")) < 8, f"{path}: header padding")
    header = json.loads(text)
    names = [k for k in header if k != "__metadata__"]
    meta = header.get("__metadata__", {})
    check(all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()),
          f"{path}: __metadata__ is not a string -> string map: {meta!r}")
    data = raw[8 + n:]
    out, at = {}, 0
    for name in sorted(names, key=lambda k: header[k]["data_offsets"]):
        e = header[name]
        check(set(e) == {"dtype", "shape", "data_offsets"}, f"{path}:{name!r}: keys {set(e)}")
        begin, end = e["data_offsets"]
        dt = ST_CODES[e["dtype"]]
        count = int(np.prod(e["shape"], dtype=np.int64))
        check(begin == at and end - begin == count * dt.itemsize and end <= len(data),
              f"{path}:{name!r}: data_offsets {e['data_offsets']}, expected [{at}, "
              f"{at + count * dt.itemsize}] of {len(data)} bytes")
        # aligned to the element size (the header ends at a multiple of 8 and larger elements
        # come first), so that a reader may view the values in place
        check(begin % dt.itemsize == 0, f"{path}:{name!r}: offset {begin} not aligned to "
              f"{dt.itemsize}")
        out[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(e["shape"])
        at = end
    check(at == len(data), f"{path}: {len(data) - at} bytes after the last tensor")
    return meta, out, names, header


def check_safetensors(prefix, path, expected=None):
    ins = inspect(prefix)
    tensors = ins["tensors"]
    ref = reader_values(prefix, tensors)
    meta, got, names, header = read_safetensors(path)
    want_meta = {"format": "pt", "exporter": "mpickpt export", "producer": ins["producer"],
                 "epoch": str(ins["epoch"]), "step": str(ins["step"]),
                 "save_counter": str(ins["save_counter"])}
    check({k: meta.get(k) for k in want_meta} == want_meta,
          f"{path}: __metadata__ {meta}, expected {want_meta}")
    check(meta.get("end_of_epoch") in ("0", "1"), f"{path}: end_of_epoch {meta!r}")
    # larger elements first, by name (the index's order, byte-wise) within an element size
    size = {t["name"]: ST_CODES[ST_OF[t["dtype"]]].itemsize for t in tensors}
    order = [t["name"] for e in (8, 4, 2, 1) for t in tensors if size[t["name"]] == e]
    by_offset = sorted(names, key=lambda k: header[k]["data_offsets"])
    check(by_offset == order, f"{path}: data order {by_offset[:8]}..., expected {order[:8]}...")
    for t in tensors:
        name, dtype = t["name"], t["dtype"]
        what = f"{path}:{name!r}"
        if not check(name in got, f"{what}: missing"):
            continue
        a = got[name]
        check(header[name]["dtype"] == ST_OF[dtype], f"{what}: dtype {header[name]['dtype']}")
        check(a.shape == tuple(t["shape"]), f"{what}: shape {a.shape}, {t['shape']}")
        check(bits(a) == bits(ref[name]), f"{what}: differs from mpickpt.open's read")
        if expected is not None and name in expected:
            check(bits(a) == bits(expected[name]), f"{what}: differs from the writer's")
        equals_dump(prefix, name, dtype, a, what)
    return len(tensors)


def leftovers(directory):
    return sorted(glob.glob(os.path.join(directory, "*.tmp-*")))


def make(prefix, *names):
    """make_ckpt's checkpoint at prefix (tests/unit/make_ckpt.c), with extra [2] int32 tensors
    of the given names."""
    args = [os.environ["MPICKPT_MAKE_CKPT"], prefix, "--counter", "3", "--epoch", str(EPOCH),
            "--step", str(STEP)]
    for n in names:
        args += ["--name", n]
    subprocess.run(args, check=True)
    return prefix


# ---- modes -------------------------------------------------------------------------------------

def mode_h5py():
    prefix = make(os.path.join(OUT, "ck"))
    out = os.path.join(OUT, "ck.h5")
    code, so, se = cli("export", prefix, out, rc=0)  # the format from the suffix
    lines = so.splitlines()
    check(len(lines) == 22 and lines[-1].startswith("exported 21 tensors (") and
          "(hdf5)" in lines[-1], f"text output: {so}")
    check(any(l.startswith("bits/bfloat16  bfloat16 [256, 256]  131072 bytes") for l in lines),
          f"a tensor's line: {so}")
    n = check_hdf5(prefix, out)
    check(n == 21, f"{n} tensors")
    # --json, an explicit format and another suffix; --force replaces
    doc = json.loads(cli("export", "--json", "--format", "hdf5", prefix + ".index",
                         os.path.join(OUT, "other.data"), rc=0)[1])
    check(doc == {"input": prefix, "output": os.path.join(OUT, "other.data"), "format": "hdf5",
                  "tensors": 21, "bytes": doc.get("bytes"), "files": [os.path.join(OUT,
                                                                               "other.data")]}
          and doc["bytes"] == sum(int(np.prod(t["shape"], dtype=np.int64)) *
                                  EXPORT_NUMPY[t["dtype"]].itemsize
                                  for t in inspect(prefix)["tensors"]), f"--json: {doc}")
    check_hdf5(prefix, os.path.join(OUT, "other.data"))
    os.truncate(out, 10)
    cli("export", "--force", prefix, out, rc=0)
    check_hdf5(prefix, out)
    # the Python package's export: the same file
    out2 = os.path.join(OUT, "py.hdf5")
    res = mpickpt.export(prefix, out2)
    check(res == {"tensors": 21, "bytes": doc["bytes"], "files": [out2]}, f"export(): {res}")
    check_hdf5(prefix, out2)
    # a TensorFlow bundle through the same command: its two files listed, data shard first
    tf = os.path.join(OUT, "bundle")
    doc = json.loads(cli("export", "--json", "--format", "tf", prefix, tf, rc=0)[1])
    files = [tf + ".data-00000-of-00001", tf + ".index"]
    check(doc["format"] == "tf" and doc["tensors"] == 21 and doc["files"] == files and
          all(os.path.isfile(f) for f in files), f"--format tf --json: {doc}")
    res = mpickpt.export(prefix, tf + "2", format="tf")
    check(res["files"] == [tf + "2.data-00000-of-00001", tf + "2.index"] and
          all(os.path.isfile(f) for f in res["files"]), f"export(format='tf'): {res}")
    check(leftovers(OUT) == [], f"temp files left: {leftovers(OUT)}")


def mode_safetensors():
    prefix = make(os.path.join(OUT, "ck"))
    out = os.path.join(OUT, "ck.safetensors")
    code, so, se = cli("export", prefix, out, rc=0)
    check(so.splitlines()[-1].endswith("(safetensors)"), f"summary: {so}")
    check(check_safetensors(prefix, out) == 21, "21 tensors")
    doc = json.loads(cli("export", "--json", "--format", "safetensors", prefix,
                         os.path.join(OUT, "st.bin"), rc=0)[1])
    check(doc["format"] == "safetensors" and doc["tensors"] == 21 and
          doc["files"] == [os.path.join(OUT, "st.bin")], f"--json: {doc}")
    check_safetensors(prefix, os.path.join(OUT, "st.bin"))
    res = mpickpt.export(prefix, os.path.join(OUT, "py.safetensors"))
    check(res["tensors"] == 21 and res["files"] == [os.path.join(OUT, "py.safetensors")],
          f"export(): {res}")
    check_safetensors(prefix, os.path.join(OUT, "py.safetensors"))
    # the header is padded so that the data starts at a multiple of 8 whatever the names' length
    for k in range(1, 9):
        p = make(os.path.join(OUT, f"pad{k}"), "x" * k)
        o = os.path.join(OUT, f"pad{k}.safetensors")
        cli("export", p, o, rc=0)
        meta, got, names, header = read_safetensors(o)
        check(("x" * k) in got and got["x" * k].tolist() == [1, -1], f"{o}: the extra tensor")
        check_safetensors(p, o)
    check(leftovers(OUT) == [], f"temp files left: {leftovers(OUT)}")


def expect_failure(args, out, needles, rc=1, before=None):
    """An export that must fail: exit rc, stderr naming each needle, OUT as before (absent when
    `before` is None), no temp file next to it."""
    code, so, se = cli("export", *args, rc=rc)
    for n in needles:
        check(n in se, f"export {args}: stderr does not name {n!r}: {se}")
    d = os.path.dirname(out) or "."
    if before is None:
        check(not os.path.lexists(out), f"export {args}: {out} was left behind")
    else:
        check(before(), f"export {args}: {out} changed")
    check(leftovers(d) == [], f"export {args}: temp files left: {leftovers(d)}")
    return se


def python_refusal(prefix, out, needle):
    """mpickpt.export(prefix, out) must raise InvalidArgumentError naming `needle`, as the CLI
    refused it, and leave nothing behind."""
    try:
        mpickpt.export(prefix, out)
        check(False, f"mpickpt.export {prefix} -> {out}: no error")
    except mpickpt.InvalidArgumentError as e:
        check(needle in str(e), f"mpickpt.export {prefix} -> {out}: {e}")
    check(not os.path.lexists(out) and leftovers(os.path.dirname(out)) == [],
          f"mpickpt.export {prefix} -> {out}: left files")


def file_bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


def mode_bad():
    prefix = make(os.path.join(OUT, "ck"))
    for suffix in ("h5", "safetensors"):
        # an existing file, without --force: refused, untouched
        out = os.path.join(OUT, f"exists.{suffix}")
        with open(out, "wb") as fh:
            fh.write(b"precious")
        expect_failure([prefix, out], out, ["exists", out, "--force"],
                       before=lambda: file_bytes(out) == b"precious")
        # links (to a file, dangling), a FIFO, a directory: refused with --force too
        victim = os.path.join(OUT, f"victim.{suffix}")
        with open(victim, "wb") as fh:
            fh.write(b"victim")
        link = os.path.join(OUT, f"link.{suffix}")
        os.symlink(victim, link)
        dangling = os.path.join(OUT, f"dangling.{suffix}")
        target = os.path.join(OUT, f"nowhere.{suffix}")
        os.symlink(target, dangling)
        fifo = os.path.join(OUT, f"fifo.{suffix}")
        os.mkfifo(fifo)
        directory = os.path.join(OUT, f"dir.{suffix}")
        os.mkdir(directory)
        for force in ([], ["--force"]):
            expect_failure(force + [prefix, link], link, [link],
                           before=lambda: os.path.islink(link) and
                           os.readlink(link) == victim and file_bytes(victim) == b"victim")
            expect_failure(force + [prefix, dangling], dangling, [dangling],
                           before=lambda: os.path.islink(dangling) and
                           not os.path.lexists(target))
            expect_failure(force + [prefix, fifo], fifo, [fifo],
                           before=lambda: stat.S_ISFIFO(os.lstat(fifo).st_mode))
            expect_failure(force + [prefix, directory], directory, [directory],
                           before=lambda: os.path.isdir(directory) and
                           os.listdir(directory) == [])
        for force, kind in (([], "exists"), (["--force"], "a symbolic link")):
            expect_failure(force + [prefix, link], link, [kind],
                           before=lambda: file_bytes(victim) == b"victim")
        expect_failure(["--force", prefix, fifo], fifo, ["a FIFO"],
                       before=lambda: stat.S_ISFIFO(os.lstat(fifo).st_mode))
        expect_failure(["--force", prefix, directory], directory, ["a directory"],
                       before=lambda: os.path.isdir(directory))
        # a missing output directory, a missing checkpoint
        out = os.path.join(OUT, "missing", f"x.{suffix}")
        expect_failure([prefix, out], out, [os.path.join(OUT, "missing")])
        out = os.path.join(OUT, f"x.{suffix}")
        expect_failure([os.path.join(OUT, "nope"), out], out, ["nope"])
        # usage errors: exit 2, nothing written
        expect_failure([prefix, os.path.join(OUT, "x.bin")], os.path.join(OUT, "x.bin"),
                       ["--format"], rc=2)
        expect_failure(["--format", "zip", prefix, out], out, ["zip"], rc=2)
        expect_failure([prefix], out, ["PREFIX and OUT"], rc=2)

    # a flipped byte in a stored piece: the read's checksum fails, the tensor is named
    bad = make(os.path.join(OUT, "flipped"))
    flip_piece_byte(CLI, bad, "dtype/int32", [0, 0])
    for suffix in ("h5", "safetensors"):
        out = os.path.join(OUT, f"flipped.{suffix}")
        expect_failure([bad, out], out, ["dtype/int32", "checksum"])
        with open(out, "wb") as fh:
            fh.write(b"old")
        expect_failure(["--force", bad, out], out, ["dtype/int32"],
                       before=lambda: file_bytes(out) == b"old")

    # names HDF5 cannot hold: both tensors named, the way out suggested; safetensors keeps them
    cases = {"both": (["a", "a/b"], ["'a'", "'a/b'"]),
             "both2": (["m/w", "m/w/x/y", "m/w.x"], ["'m/w'", "'m/w/x/y'"]),
             "leading": (["/lead"], ["'/lead'", "empty"]),
             "trailing": (["trail/"], ["'trail/'", "empty"]),
             "double": (["x//y"], ["'x//y'", "empty"]),
             "dot": (["p/./q"], ["'p/./q'", "\".\""]),
             "dot0": (["./q"], ["'./q'", "\".\""])}
    for case, (names, needles) in cases.items():
        p = make(os.path.join(OUT, f"names-{case}"), *names)
        out = os.path.join(OUT, f"names-{case}.h5")
        expect_failure([p, out], out, needles + ["safetensors"])
        st = os.path.join(OUT, f"names-{case}.safetensors")
        cli("export", p, st, rc=0)
        meta, got, order, header = read_safetensors(st)
        for k, n in enumerate(names):
            check(n in got, f"{st}: {n!r} missing")
    # ".." is a plain name to HDF5
    p = make(os.path.join(OUT, "names-dotdot"), "../up", "a/../b")
    cli("export", p, os.path.join(OUT, "names-dotdot.h5"), rc=0)
    check_hdf5(p, os.path.join(OUT, "names-dotdot.h5"))

    # "__metadata__" is safetensors' own key; HDF5 keeps it
    p = make(os.path.join(OUT, "meta"), "__metadata__")
    out = os.path.join(OUT, "meta.safetensors")
    expect_failure([p, out], out, ["'__metadata__'", "metadata"])
    python_refusal(p, out, "__metadata__")
    cli("export", p, os.path.join(OUT, "meta.h5"), rc=0)
    check_hdf5(p, os.path.join(OUT, "meta.h5"))
    # the Python package: the same errors as the CLI
    try:
        mpickpt.export(prefix, os.path.join(OUT, "exists.h5"))
        check(False, "mpickpt.export over an existing file: no error")
    except mpickpt.ExistsError:
        pass
    check(file_bytes(os.path.join(OUT, "exists.h5")) == b"precious", "exists.h5 changed")
    try:
        mpickpt.export(prefix, os.path.join(OUT, "link.h5"), overwrite=True)
        check(False, "mpickpt.export over a link: no error")
    except mpickpt.Error as e:
        check("symbolic link" in str(e), f"mpickpt.export over a link: {e}")
    try:
        mpickpt.export(prefix, os.path.join(OUT, "x.bin"))
        check(False, "mpickpt.export without a format: no error")
    except mpickpt.InvalidArgumentError:
        pass

    # a read-only output directory: root ignores permissions, so a read-only bind mount in a
    # private mount namespace (gone with the process); others chmod 0555
    ro = os.path.join(OUT, "readonly")
    os.mkdir(ro)
    if os.geteuid() == 0:
        for suffix in ("h5", "safetensors"):
            out = os.path.join(ro, f"x.{suffix}")
            p = in_namespace(f'mount --bind "{ro}" "{ro}" && mount -o remount,bind,ro "{ro}" && '
                             f'"{CLI}" export "{prefix}" "{out}"; echo "rc=$?"; ls -A "{ro}"')
            if p is None:
                break
            check(p.stdout.strip() == "rc=1" and "Read-only file system" in p.stderr and
                  ro in p.stderr, f"read-only directory ({suffix}): {p.stdout} {p.stderr}")
        full_disks(prefix)
    else:
        os.chmod(ro, 0o555)
        for suffix in ("h5", "safetensors"):
            out = os.path.join(ro, f"x.{suffix}")
            expect_failure([prefix, out], out, ["Permission denied", ro])
        os.chmod(ro, 0o755)
    check(os.listdir(ro) == [], f"{ro}: {os.listdir(ro)}")


def in_namespace(script):
    """Runs a shell script in a private mount namespace (its mounts vanish with it); None, after
    saying so, when this machine does not allow that."""
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    if "rc=" not in p.stdout:
        print(f"SKIP (no private mount namespace or mount): {p.stderr.strip()}")
        return None
    return p


def full_disks(prefix):
    """Exports onto small file systems: tmpfs (fallocate reserves the file's room) and ext2 in a
    loop image (no fallocate: a pad file holds the metadata's room), sizes around what the
    export needs (~270 KB of file, ~600 KB reserved), so that some fail and some fit. Every run
    ends with exit 0 and a complete file, or exit 1 saying so and nothing left; never a crash
    (HDF5 1.10 crashes when its metadata flush at close meets a full disk)."""
    sweeps = {"tmpfs": [64] + list(range(256, 292, 4)) + [700],
              "ext2": list(range(256, 896, 32))}
    for fs, sizes in sweeps.items():
        for suffix in ("h5", "safetensors"):
            outcomes = set()
            for k in sizes:
                mnt = os.path.join(OUT, f"mnt-{fs}-{k}-{suffix}")
                os.mkdir(mnt)
                img, copy = mnt + ".img", mnt + f".{suffix}"
                mount = (f'mount -t tmpfs -o size={k}k tmpfs "{mnt}"' if fs == "tmpfs" else
                         f'truncate -s {k}k "{img}" && mke2fs -q -t ext2 -F "{img}" && '
                         f'mount -o loop "{img}" "{mnt}" && rmdir "{mnt}/lost+found"')
                p = in_namespace(f'{mount} && "{CLI}" export "{prefix}" "{mnt}/x.{suffix}" '
                                 f'>/dev/null; echo "rc=$?"; ls -A "{mnt}"; '
                                 f'cp "{mnt}/x.{suffix}" "{copy}" 2>/dev/null; true')
                if p is None:
                    return
                lines = p.stdout.split()
                rc, listing = lines[0], lines[1:]
                what = f"{fs} of {k} KiB, {suffix}: {p.stdout!r} {p.stderr!r}"
                outcomes.add(rc)
                if rc == "rc=0":
                    check(listing == [f"x.{suffix}"], what)
                    (check_hdf5 if suffix == "h5" else check_safetensors)(prefix, copy)
                else:
                    check(rc == "rc=1" and listing == [] and
                          ("No space left" in p.stderr or "no space left" in p.stderr), what)
                if os.path.exists(img):
                    os.unlink(img)
            check(outcomes == {"rc=0", "rc=1"},
                  f"{fs}, {suffix}: the sizes do not span failure and success: {outcomes}")


def run_writer(np_, env, directory, mode, *args):
    """This script's writer `mode` under mpirun -np np_; True when it exited 0."""
    p = subprocess.run([os.environ.get("MPIEXEC", "mpirun"), "-np", str(np_), sys.executable,
                        "-B", os.path.abspath(__file__), directory, mode, *args], env=env)
    return check(p.returncode == 0, f"the writer {mode} (mpirun -np {np_}): exit {p.returncode}")


def header_limit(env, np_):
    """A safetensors header over its readers' limit (100,000,000 bytes, safetensors'
    MAX_HEADER_SIZE) is refused before anything is written, naming the way out; the TensorFlow
    export of the same checkpoint works."""
    directory = os.path.join(OUT, "long")
    if not run_writer(np_, env, directory, "write-long"):
        return
    prefix = os.path.join(directory, "ckpt-1")
    names = {t["name"] for t in inspect(prefix)["tensors"]}
    check({long_name(j) for j in range(1, LONG_NAMES + 1)} <= names, "the long names")
    out = os.path.join(OUT, "long.safetensors")
    se = expect_failure([prefix, out], out, ["100000000", "--format hdf5"])
    m = re.search(r"header of (\d+) tensors would be (\d+) bytes", se)
    check(m is not None and int(m.group(1)) == len(names) and
          100_000_000 < int(m.group(2)) < 110_000_000,
          f"the refusal gives the tensor count ({len(names)}) and the size: {se}")
    python_refusal(prefix, out, "100000000")
    doc = json.loads(cli("export", "--json", "--format", "tf", prefix,
                         os.path.join(OUT, "long-tf"), rc=0)[1])
    check(doc.get("tensors") == len(names), f"the TensorFlow export of the long names: {doc}")


def mode_mpi(layout, np_):
    directory = os.path.join(OUT, "ck")
    env = dict(os.environ, MPICKPT_PACK_BYTES="256")
    pre = os.environ.get("MPICKPT_ASAN_PRELOAD")
    if pre:
        env.update(LD_PRELOAD=pre, ASAN_OPTIONS="detect_leaks=0:strict_string_checks=1")
    if layout == "per-node":
        env.update(MPICKPT_RANKS_PER_NODE="2", MPICKPT_HIER_MERGE="1")
    try:
        import torch  # noqa: F401 - the writer's bfloat16 tensors
    except ImportError as e:
        print(f"SKIP: PyTorch is not usable here ({e}); the writer needs torch.bfloat16")
        sys.exit(77)
    if not run_writer(np_, env, directory, "write", layout):
        return
    if layout == "per-rank" and np_ == 2:
        header_limit(env, np_)
    prefix = os.path.join(directory, "ckpt-1")
    ins = inspect(prefix)
    check(ins["world_size"] == np_ and ins["layout"] == layout and ins["step"] == STEP and
          ins["epoch"] == EPOCH, f"header {ins}")
    rows = 2 * np_ + 3
    expected = {f"dtypes/{d}": global_values(d, (rows, 3)) for d in ALL_DTYPES}
    expected[KERNEL] = global_values("float32", (rows, 5))
    expected["big"] = global_values("float64", (rows, 64))
    expected["scalar"] = np.array(2.5)
    expected["empty"] = np.zeros((0, 4), dtype=np.float32)
    by_name = {t["name"]: t for t in ins["tensors"]}
    check(set(expected) <= set(by_name), f"tensors {sorted(by_name)}")
    pieces = [p for t in ins["tensors"] for p in t["pieces"]]
    if np_ > 1:
        check(len(by_name["dtypes/bfloat16"]["pieces"]) == np_ or layout == "shared",
              f"bfloat16's pieces: {by_name['dtypes/bfloat16']['pieces']}")
        check(by_name["dtypes/bfloat16"]["kind"] == "partitioned", "partitioned")
    if layout != "shared":  # small pieces packed, large ones not
        check(any(p["packed"] for p in pieces) and not all(p["packed"] for p in pieces),
              f"packed: {[p['packed'] for p in pieces]}")
        check(any(p["dataset"].startswith("/packs/") for p in pieces), "a piece in /packs")
    out = os.path.join(OUT, "ck.h5")
    cli("export", prefix, out, rc=0)
    check_hdf5(prefix, out, expected)
    out = os.path.join(OUT, "ck.safetensors")
    cli("export", prefix, out, rc=0)
    check_safetensors(prefix, out, expected)

    # ckpt-2 has the PerRank components: safetensors keeps every name; HDF5 cannot hold
    # "per_rank" next to "per_rank/parallel_component_1" (one rank: there is no component 1)
    prefix = os.path.join(directory, "ckpt-2")
    expected["per_rank"] = np.full(3, 0, dtype=np.int32)
    for r in range(1, np_):
        expected[f"per_rank/parallel_component_{r}"] = np.full(3, r, dtype=np.int32)
    check(set(expected) <= {t["name"] for t in inspect(prefix)["tensors"]}, "ckpt-2's tensors")
    out = os.path.join(OUT, "ck2.safetensors")
    cli("export", prefix, out, rc=0)
    check_safetensors(prefix, out, expected)
    out = os.path.join(OUT, "ck2.h5")
    if np_ == 1:
        cli("export", prefix, out, rc=0)
        check_hdf5(prefix, out, expected)
    else:
        expect_failure([prefix, out], out,
                       ["'per_rank'", "'per_rank/parallel_component_1'", "safetensors",
                        f"and {np_ - 2} more" if np_ > 2 else "group"])
    check(leftovers(OUT) == [], f"temp files left: {leftovers(OUT)}")


os.makedirs(OUT, exist_ok=True)
if MODE == "h5py":
    mode_h5py()
elif MODE == "safetensors":
    mode_safetensors()
elif MODE == "bad":
    mode_bad()
elif MODE == "mpi":
    mode_mpi(sys.argv[3], int(sys.argv[4]))
else:
    sys.exit(f"unknown mode {MODE}")
finish(lambda n, bad: f"export {' '.join(sys.argv[2:])}: {n} checks, {bad} failed")
