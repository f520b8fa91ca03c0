#!/usr/bin/python3
"""`mpickpt import-tf` and `mpickpt export --format tf` against bundles from tfbundle.py, a
TensorFlow bundle writer and reader written from the format alone (docs/interop.md, "Testing against the TensorFlow format"):

    /usr/bin/python3 -B test_import_tf.py CASE OUTDIR [WRITERDIR]

Environment: MPICKPT_CLI (the tool), PYTHONPATH with the mpickpt package. Cases (one ctest each,
import_tf_<case>):
  roundtrip   every dtype (NaN payloads, -0.0, inf, extremes), scalars, zero-size tensors, TF2
              object-graph names; uncompressed and Snappy blocks; 1 and 3 shards; values bit
              for bit through mpickpt.open() and `dump --json`; verify; --counter/--epoch/--step
              in `inspect --json`; the --json report; aligned data, empty shards, path-like
              names; protobuf's rules (wide varints, unknown fields, a field twice); a TF2
              object graph (DT_STRING) refused, and skipped with --skip-unsupported
  sliced      partitioned tensors: along axis 0, axis 1, a 2x2 grid, a full dimension, uneven,
              3-d, with shards and Snappy
  multiblock  hundreds of tensors in indexes of many small blocks (restart interval 1 and 16);
              more shards than the tool may have files open
  big         a tensor of a few MB (Snappy index, 2 shards)
  flips       every byte of a small index flipped, every length of it cut
  directory   TF_PREFIX a directory: its `checkpoint` file names the bundle (in that directory
              only); a missing, hostile or malformed `checkpoint` file refused
  bad         damaged and hostile bundles: exit 1, a message naming the problem, no output and no
              temp file left, the input untouched
  export      import -> export --format tf -> read by tfbundle.read_bundle -> import again;
              the output byte for byte what tfbundle writes for the same tensors; a --force
              export failing on the index leaves the old bundle whole
  export_pkg  the same from a checkpoint the package wrote at 4 ranks (WRITERDIR, case pkgwrite)
  restore_prep  a bundle imported for the restore tests (below)
MPI cases (mpirun -np N):
  pkgwrite    CheckpointManager.save of shards, replicated arrays and plain values
  restore     the imported checkpoint (WRITERDIR, case restore_prep) restored by the package on
              N ranks, each rank checking its own block of every tensor
"""
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys

import numpy as np

import scriptcheck
import tfbundle as tb
from scriptcheck import check
from tfbundle import Tensor

CASE = sys.argv[1]
OUT = sys.argv[2]
CLI = os.environ.get("MPICKPT_CLI", "")
TIMEOUT = 120  # per command: far above need; only a hang (a FIFO blocked on) reaches it


def cli_env():
    """The tool's environment: in the sanitizer build the interpreter runs with libasan preloaded
    and leak checks off (ckpt_add_python_test); the tool is instrumented itself, so it gets
    neither the preload nor the interpreter's exemption; it unwinds at malloc the fast way, as
    everywhere in that build (ckpt_asan_fast_unwind, tests/cmake/MpickptTesting.cmake)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if "ASAN_OPTIONS" in env:
        opts = os.path.join(env.get("MPICKPT_BINARY_DIR", ""), "asan-options", "%b")
        env["ASAN_OPTIONS"] = ("detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:"
                               "include_if_exists=" + opts)
    return env


def run(*args, rc=None, timeout=TIMEOUT):
    """Runs the tool; checks the exit code when rc is given and that no sanitizer spoke.
    Returns (exit code, stdout, stderr)."""
    try:
        p = subprocess.run([CLI, *args], capture_output=True, timeout=timeout, env=cli_env())
    except subprocess.TimeoutExpired:
        check(False, f"mpickpt {args!r}: no answer in {timeout} s (blocked?)")
        return -1, "", ""
    so, se = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    if rc is not None:
        check(p.returncode == rc,
              f"mpickpt {args!r}: exit {p.returncode}, expected {rc}\nstdout: {so[:3000]}\n"
              f"stderr: {se[:3000]}")
    check("Sanitizer" not in se and "runtime error" not in se,
          f"mpickpt {args!r}: sanitizer report:\n{se}")
    return p.returncode, so, se


def run_json(*args, rc=0):
    code, so, se = run(*args, rc=rc)
    try:
        return json.loads(so), se
    except ValueError as e:
        check(False, f"mpickpt {args!r}: not JSON ({e}): {so[:2000]!r}\nstderr: {se}")
        return {}, se


def fresh(*parts):
    d = os.path.join(OUT, *parts)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def name_of(key):
    return key.decode() if isinstance(key, bytes) else key


def dtype_of(v):
    """mpickpt's dtype name of a value handed to write_bundle."""
    t = v if isinstance(v, Tensor) else Tensor(np.asarray(v))
    return tb.DT_MPICKPT[t.dt()]


def bits_of(v):
    a = np.asarray(v.value if isinstance(v, Tensor) else v)
    return np.ascontiguousarray(a).tobytes(), tuple(a.shape)


def compare(out, tensors, what, skip=()):
    """The checkpoint at `out` holds exactly `tensors` (minus `skip`): names, dtypes, shapes and
    bytes; its own verify() passes."""
    import mpickpt

    # mpickpt.open() keeps the package's own records (__mpickpt__/...) to itself
    want = {name_of(k): v for k, v in tensors.items()
            if name_of(k) not in skip and not name_of(k).startswith("__mpickpt__/")}
    try:
        ck = mpickpt.open(out)
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        check(False, f"{what}: mpickpt.open({out}): {type(e).__name__}: {e}")
        return
    with ck:
        check(set(ck) == set(want), f"{what}: names {sorted(set(ck) ^ set(want))[:10]} differ")
        for name, v in want.items():
            if name not in ck:
                continue
            a = ck[name]
            wb, ws = bits_of(v)
            check(a.dtype_name == dtype_of(v), f"{what}: '{name}' is {a.dtype_name}, "
                  f"expected {dtype_of(v)}")
            check(a.shape == ws, f"{what}: '{name}' has shape {a.shape}, expected {ws}")
            if a.shape == ws and a.dtype_name == dtype_of(v):
                got = a.read()
                check(got.tobytes() == wb, f"{what}: '{name}' values differ")
        try:
            ck.verify()
        except Exception as e:  # noqa: BLE001
            check(False, f"{what}: verify(): {type(e).__name__}: {e}")


def import_tf(tf, out, *flags, rc=0, json_doc=True):
    args = ["import-tf", tf, out, *flags] + (["--json"] if json_doc else [])
    if json_doc and rc == 0:
        doc, _ = run_json(*args, rc=rc)
        return doc
    return run(*args, rc=rc)


def check_report(doc, tf, out, tensors, skipped=(), what=""):
    """The --json document of a successful import."""
    n = len([k for k in tensors if name_of(k) not in skipped])
    nbytes = sum(len(bits_of(v)[0]) for k, v in tensors.items() if name_of(k) not in skipped)
    check(doc.get("format") == "tf", f"{what}: --json format: {doc}")
    check(doc.get("input") == tf and doc.get("output") == out,
          f"{what}: --json input/output {doc.get('input')!r} {doc.get('output')!r}")
    check(doc.get("bundle") == tf, f"{what}: --json bundle {doc.get('bundle')!r}, not {tf!r}")
    check(doc.get("tensors") == n, f"{what}: --json tensors {doc.get('tensors')}, expected {n}")
    check(doc.get("bytes") == nbytes, f"{what}: --json bytes {doc.get('bytes')}, expected {nbytes}")
    files = doc.get("files")
    check(isinstance(files, list) and files and all(
        os.path.exists(f if os.path.isabs(f) else os.path.join(os.path.dirname(out), f))
        for f in files), f"{what}: --json files {files}")
    check(isinstance(files, list) and any(str(f).endswith(".index") for f in files),
          f"{what}: --json files has no .index: {files}")
    sk = doc.get("skipped")
    check(isinstance(sk, list) and sorted(s.get("name") for s in sk) == sorted(skipped),
          f"{what}: --json skipped {sk}, expected {sorted(skipped)}")


# ---- values -------------------------------------------------------------------------------------


def special_floats(dt, n, rng):
    """Random values of float dtype dt with every special bit pattern among them: quiet and
    signalling NaNs with payloads, negative NaN, +-0, +-inf, the smallest subnormal, max."""
    info = np.finfo(dt)
    a = rng.standard_normal(n).astype(dt)
    ui = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dt).itemsize]
    bits = a.view(ui)
    nbits = 8 * np.dtype(dt).itemsize
    mant = info.nmant
    exp_all = ((1 << (nbits - 1 - mant)) - 1) << mant
    sign = 1 << (nbits - 1)
    specials = [exp_all | (1 << (mant - 1)),            # quiet NaN
                exp_all | (1 << (mant - 1)) | 0x5,      # quiet NaN, payload
                exp_all | 0x1,                          # signalling NaN
                sign | exp_all | (1 << (mant - 1)) | 3,  # negative NaN
                exp_all, sign | exp_all,                # +inf, -inf
                0, sign,                                # +0, -0
                1, sign | 1,                            # smallest subnormals
                exp_all - 1]                            # max
    for i, s in enumerate(specials[:n]):
        bits[i] = s
    return a


def bf16(n, rng):
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    bits[:6] = [0x7FC0, 0x7F81, 0xFFC1, 0x7F80, 0xFF80, 0x8000]  # NaNs, +-inf, -0
    return Tensor(bits, "bfloat16")


def int_extremes(dt, shape, rng):
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    flat = a.reshape(-1)
    for i, v in enumerate([info.min, info.max, 0, -1 if info.min < 0 else 1][:flat.size]):
        flat[i] = v
    return a


def every_dtype(rng, prefix="v"):
    """One tensor (and one scalar) of every dtype mpickpt has, TF2 object-graph names."""
    t = {}

    def nm(s):
        return f"{prefix}/{s}/.ATTRIBUTES/VARIABLE_VALUE"

    for dt in (np.float16, np.float32, np.float64):
        t[nm(np.dtype(dt).name)] = special_floats(dt, 24, rng).reshape(4, 6)
        t[nm(np.dtype(dt).name + "_scalar")] = special_floats(dt, 1, rng).reshape(())
    t[nm("bfloat16")] = Tensor(bf16(30, rng).value.reshape(5, 6), "bfloat16")
    t[nm("bfloat16_scalar")] = Tensor(np.array(0x3F80, dtype=np.uint16), "bfloat16")
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        t[nm(np.dtype(dt).name)] = int_extremes(dt, (3, 2, 2), rng)
        t[nm(np.dtype(dt).name + "_scalar")] = np.array(np.iinfo(dt).max, dtype=dt)
    t[nm("bool")] = rng.integers(0, 2, (7,)).astype(np.bool_)
    t[nm("bool_scalar")] = np.array(True)
    # zero-size tensors
    t[nm("empty_f32")] = np.zeros((0,), np.float32)
    t[nm("empty_2d_i64")] = np.zeros((3, 0), np.int64)
    t[nm("empty_bf16")] = Tensor(np.zeros((0, 4), np.uint16), "bfloat16")
    # what TensorFlow 2 writes besides the model
    t["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] = np.int64(1)
    t["model/layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"] = rng.standard_normal((8, 4)).astype(
        np.float32)
    t["model/layer/bias/.ATTRIBUTES/VARIABLE_VALUE"] = np.zeros(4, np.float32)
    t["model/layer/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"] = \
        rng.standard_normal((8, 4)).astype(np.float32)
    return t


def dump_check(out, name, v, what):
    """`mpickpt dump --json` of one tensor: shape, dtype and values as docs/cli.md words them."""
    doc, _ = run_json("dump", "--json", out, name)
    a = np.asarray(v.value if isinstance(v, Tensor) else v)
    check(doc.get("name") == name and doc.get("dtype") == dtype_of(v) and
          doc.get("shape") == list(a.shape), f"{what}: dump --json {name}: "
          f"{ {k: doc.get(k) for k in ('name', 'dtype', 'shape')} }")
    vals = doc.get("values", [])
    flat = a.reshape(-1)
    if not check(len(vals) == flat.size, f"{what}: dump --json {name}: {len(vals)} values"):
        return
    if isinstance(v, Tensor) and v.dtype == "bfloat16":
        flat = (flat.astype(np.uint32) << 16).view(np.float32)
    for i, (j, x) in enumerate(zip(vals, flat)):
        if a.dtype.kind == "f" or (isinstance(v, Tensor) and v.dtype == "bfloat16"):
            if np.isnan(x):
                ok = j == "NaN"
            elif np.isinf(x):
                ok = j == ("Infinity" if x > 0 else "-Infinity")
            else:
                ok = isinstance(j, (int, float)) and np.array(j, dtype=flat.dtype) == x and \
                    np.signbit(np.array(j, dtype=np.float64)) == np.signbit(x)
        elif a.dtype == np.bool_:
            ok = j is bool(x)
        else:
            ok = isinstance(j, int) and j == int(x)
        if not check(ok, f"{what}: dump --json {name}[{i}] = {j!r}, expected {x!r}"):
            return


# ---- cases ---------------------------------------------------------------------------------------


def case_roundtrip():
    rng = np.random.default_rng(18)
    t = every_dtype(rng)
    for comp in (None, "snappy"):
        for shards in (1, 3):
            tag = f"{comp or 'raw'}-{shards}"
            d = fresh(tag)
            tf = os.path.join(d, "tf", "model.ckpt")
            os.makedirs(os.path.dirname(tf))
            b = tb.write_bundle(tf, t, shards=shards, compression=comp,
                                block_size=512 if comp else 262144)
            if comp:
                check(any(x.type == tb.TYPE_SNAPPY for x in b.blocks), f"{tag}: no Snappy block")
            out = os.path.join(d, "out", "ckpt-5")
            os.makedirs(os.path.dirname(out))
            doc = import_tf(tf, out, "--counter", "5", "--epoch", "3", "--step", "1200")
            check_report(doc, tf, out, t, what=tag)
            compare(out, t, tag)
            run("verify", out, rc=0)
            ins, _ = run_json("inspect", "--json", out)
            check((ins.get("save_counter"), ins.get("epoch"), ins.get("step")) == (5, 3, 1200),
                  f"{tag}: inspect --json counter/epoch/step: {ins.get('save_counter')}, "
                  f"{ins.get('epoch')}, {ins.get('step')}")
            names = {x.get("name"): x for x in ins.get("tensors", [])}
            for k, v in t.items():
                x = names.get(k, {})
                check(x.get("dtype") == dtype_of(v) and
                      tuple(x.get("shape", ())) == bits_of(v)[1],
                      f"{tag}: inspect --json {k}: {x.get('dtype')} {x.get('shape')}")
            if shards == 1 and comp is None:
                for k in ("v/float32/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/float16/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/float64_scalar/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/bfloat16/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/uint64/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/int64/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/bool/.ATTRIBUTES/VARIABLE_VALUE",
                          "v/empty_2d_i64/.ATTRIBUTES/VARIABLE_VALUE"):
                    dump_check(out, k, t[k], tag)
    # data aligned to 64 bytes (zeros between tensors), more shards than data entries (empty
    # shard files), names that look like paths (data, never paths)
    d = fresh("aligned")
    tf = os.path.join(d, "tf")
    odd = {"../../escape": np.arange(3, dtype=np.int8), "/leading/slash": np.float32(1.5),
           "a//b": np.arange(2, dtype=np.uint16), "trailing/": np.int64(-1),
           "with space and \u00e9": np.arange(4.0), "%2F%25": np.array([True]),
           ".": np.int32(7), "..": np.int32(8)}
    t3 = {**{k: v for k, v in list(t.items())[:6]}, **odd}
    b = tb.write_bundle(tf, t3, shards=20, align=64)
    check(any(os.path.getsize(p) == 0 for p in b.data_paths), "aligned: no empty shard")
    check(all(e["offset"] % 64 == 0 for e in b.entries.values() if e.get("size", 0) >= 64),
          "aligned: offsets not aligned")
    out = os.path.join(d, "out", "ckpt-1")
    os.makedirs(os.path.dirname(out))
    doc = import_tf(tf, out)
    check_report(doc, tf, out, t3, what="aligned")
    compare(out, t3, "aligned")
    check(sorted(os.listdir(d)) == sorted(["out", "tf.index"] + [os.path.basename(p) for p in
                                                                  b.data_paths]) and
          sorted(os.listdir(os.path.dirname(out))) == ["ckpt-1.data-00000-of-00001",
                                                       "ckpt-1.index"] and
          not os.path.exists(os.path.join(OUT, "escape")), f"aligned: files {os.listdir(d)}")
    # protobuf's rules, as TensorFlow's parser applies them: an int32/enum varint keeps its low
    # 32 bits (dtype 2^32 + 3 is DT_INT32), unknown fields are skipped (in entries and in the
    # header), a scalar field given twice takes the last value
    d = fresh("protobuf")
    tf = os.path.join(d, "tf")
    tp = {"wide_dtype": np.arange(3, dtype=np.int32), "unknown_fields": np.float32(2.5),
          "twice": np.arange(2, dtype=np.int32)}
    hooks = {b"wide_dtype": {"dtype": (1 << 32) + 3},
             b"unknown_fields": {"extra": b"\x48\x07\x7a\x03abc\x85\x01\x01\x02\x03\x04"},
             b"twice": {"dtype": 9, "extra": b"\x08\x03"}}
    tb.write_bundle(tf, tp, entry_hook=lambda k, f: dict(f, **hooks.get(k, {})),
                    pairs_hook=lambda p: [(p[0][0], p[0][1] + b"\x50\x01\x5a\x00")] + p[1:])
    got, _ = tb.read_bundle(tf)
    check(all(got[k.encode()].tobytes() == bits_of(v)[0] for k, v in tp.items()),
          "protobuf: tfbundle's reader disagrees")
    out = os.path.join(d, "ckpt-1")
    doc = import_tf(tf, out)
    check_report(doc, tf, out, tp, what="protobuf")
    compare(out, tp, "protobuf")
    # the defaults: no --counter/--epoch/--step, no --json: one line on stdout, exit 0
    d = fresh("defaults")
    tf = os.path.join(d, "b")
    tb.write_bundle(tf, {"x": np.arange(3, dtype=np.int32)})
    out = os.path.join(d, "ckpt-1")
    code, so, se = import_tf(tf, out, json_doc=False)
    check(code == 0, f"defaults: exit {code}: {se}")
    ins, _ = run_json("inspect", "--json", out)
    check((ins.get("epoch"), ins.get("step")) == (0, 0), f"defaults: epoch/step {ins}")
    # a realistic TF2 checkpoint: the object graph is a DT_STRING entry
    d = fresh("tf2")
    tf = os.path.join(d, "ckpt-1")
    t2 = dict(t)
    t2["_CHECKPOINTABLE_OBJECT_GRAPH"] = Tensor([b"\x0a\x10\x0a\x0e\x08\x01\x12\x0a"], "string", [])
    tb.write_bundle(tf, t2)
    out = os.path.join(d, "out")
    code, so, se = import_tf(tf, out, rc=1, json_doc=False)
    check("_CHECKPOINTABLE_OBJECT_GRAPH" in se, f"tf2: the error does not name the key: {se!r}")
    check(not os.path.exists(out + ".index"), "tf2: a failed import left an index")
    doc = import_tf(tf, out, "--skip-unsupported")
    check_report(doc, tf, out, t2, skipped=["_CHECKPOINTABLE_OBJECT_GRAPH"], what="tf2")
    sk = (doc.get("skipped") or [{}])[0]
    check(sk.get("dtype") == "DT_STRING" and isinstance(sk.get("reason"), str) and sk["reason"],
          f"tf2: skipped entry {sk}")
    compare(out, t2, "tf2", skip=["_CHECKPOINTABLE_OBJECT_GRAPH"])


def grid_tensors(rng):
    """(tensors, slices): partitioned tensors of several kinds of split."""
    t, s = {}, {}
    t["rows"] = rng.standard_normal((6, 4)).astype(np.float32)
    s["rows"] = [[(0, 2), (0, 4)], [(2, 3), (0, 4)], [(5, 1), (0, 4)]]
    t["cols"] = int_extremes(np.int64, (3, 7), rng)
    s["cols"] = [[(0, 3), (0, 3)], [(0, 3), (3, 4)]]
    t["grid"] = special_floats(np.float64, 20, rng).reshape(4, 5)
    s["grid"] = [[(0, 2), (0, 2)], [(0, 2), (2, 3)], [(2, 2), (0, 2)], [(2, 2), (2, 3)]]
    t["fulldim"] = rng.standard_normal((5, 3)).astype(np.float16)
    s["fulldim"] = [[(0, 3), None], [(3, 2), None]]
    t["fullcols"] = int_extremes(np.uint8, (2, 9), rng)
    s["fullcols"] = [[None, (0, 4)], [None, (4, 5)]]
    t["model/emb/.ATTRIBUTES/VARIABLE_VALUE"] = int_extremes(np.int32, (4, 3, 2), rng)
    s["model/emb/.ATTRIBUTES/VARIABLE_VALUE"] = [[(0, 1), None, (0, 2)], [(1, 3), (0, 3), None]]
    t["bf"] = Tensor(bf16(12, rng).value.reshape(4, 3), "bfloat16")
    s["bf"] = [[(0, 2), None], [(2, 2), None]]
    t["one"] = np.arange(5, dtype=np.uint64)
    s["one"] = [[None]]  # a single slice covering everything
    t["plain"] = np.arange(4, dtype=np.int16)  # not sliced, among sliced ones
    return t, s


def pieces_of(ins, name):
    x = next((x for x in ins.get("tensors", []) if x.get("name") == name), {})
    return x, sorted((tuple(p.get("start", ())), tuple(p.get("count", ())))
                     for p in x.get("pieces", []))


def case_sliced():
    rng = np.random.default_rng(7)
    t, s = grid_tensors(rng)
    for comp, shards in ((None, 1), ("snappy", 3), (None, 2)):
        tag = f"{comp or 'raw'}-{shards}"
        d = fresh(tag)
        tf = os.path.join(d, "tf")
        tb.write_bundle(tf, t, shards=shards, compression=comp, slices=s,
                        block_size=256 if comp else 262144)
        got, _ = tb.read_bundle(tf)  # the generator agrees with itself
        check(all(got[k.encode()].tobytes() == bits_of(v)[0] for k, v in t.items()),
              f"{tag}: tfbundle.read_bundle disagrees with write_bundle")
        out = os.path.join(d, "ckpt-1")
        doc = import_tf(tf, out)
        check_report(doc, tf, out, t, what=tag)
        compare(out, t, tag)
        run("verify", out, rc=0)
        ins, _ = run_json("inspect", "--json", out)
        for name, spec in s.items():
            x, pieces = pieces_of(ins, name)
            shape = bits_of(t[name])[1]
            want = sorted((tuple(0 if e is None else e[0] for e in sp),
                           tuple(n if e is None else e[1] for e, n in zip(sp, shape)))
                          for sp in spec)
            check(x.get("kind") == "partitioned" or len(spec) == 1,
                  f"{tag}: '{name}' is {x.get('kind')}, expected partitioned")
            check(pieces == want, f"{tag}: '{name}' pieces {pieces}, expected the slices {want}")
        # reads across slice boundaries
        import mpickpt
        with mpickpt.open(out) as ck:
            g = t["grid"]
            check(ck["grid"][1:3, 1:4].tobytes() == np.ascontiguousarray(g[1:3, 1:4]).tobytes(),
                  f"{tag}: grid[1:3, 1:4] across four slices")
        dump_check(out, "grid", t["grid"], tag)


def case_multiblock():
    rng = np.random.default_rng(3)
    t = {}
    for i in range(400):
        name = f"model/layer_{i:03d}/{'kernel' if i % 2 else 'bias'}/.ATTRIBUTES/VARIABLE_VALUE"
        t[name] = rng.standard_normal((i % 5, 3)).astype(np.float32)
    t["aaa"] = np.int8(-1)
    t["\u00e9t\u00e9/\u4e2d\u6587"] = np.arange(3, dtype=np.int16)  # multi-byte UTF-8
    t["zzz" * 40] = np.arange(2, dtype=np.uint32)  # a long key
    s = {"model/layer_001/kernel/.ATTRIBUTES/VARIABLE_VALUE": [[(0, 1), None]]}
    for comp in (None, "snappy"):
        for ri in (1, 16):
            for bs in (200, 4096):
                tag = f"{comp or 'raw'}-r{ri}-b{bs}"
                d = fresh(tag)
                tf = os.path.join(d, "tf")
                b = tb.write_bundle(tf, t, shards=2, compression=comp, restart_interval=ri,
                                    block_size=bs, slices=s)
                nblocks = len(b.data_blocks())
                check(nblocks >= (40 if bs == 200 else 5),
                      f"{tag}: only {nblocks} data blocks")
                out = os.path.join(d, "ckpt-1")
                doc = import_tf(tf, out)
                check_report(doc, tf, out, t, what=tag)
                compare(out, t, tag)
    # TensorFlow's own block size: one data block, restart points every 16 entries
    d = fresh("tf-default")
    tf = os.path.join(d, "tf")
    b = tb.write_bundle(tf, t)
    check(len(b.data_blocks()) == 1, f"tf-default: {len(b.data_blocks())} data blocks")
    out = os.path.join(d, "ckpt-1")
    import_tf(tf, out)
    compare(out, t, "tf-default")
    # more shards than the tool may open files at once (RLIMIT_NOFILE 100): 300 shards, their
    # tensors read in key order, which visits each shard twice
    d = fresh("many-shards")
    tf = os.path.join(d, "tf")
    t = {f"t{i:04d}": np.full((2,), i, np.int32) for i in range(600)}
    tb.write_bundle(tf, t, shards=300)
    out = os.path.join(d, "ckpt-1")

    def nofile_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100))

    p = subprocess.run([CLI, "import-tf", tf, out], capture_output=True, timeout=TIMEOUT,
                       env=cli_env(), preexec_fn=nofile_limit)
    check(p.returncode == 0, f"many-shards: exit {p.returncode}: {p.stderr.decode()[:300]}")
    if p.returncode == 0:
        compare(out, t, "many-shards")


def case_big():
    rng = np.random.default_rng(11)
    t = {"big/.ATTRIBUTES/VARIABLE_VALUE": rng.standard_normal((1024, 1100)).astype(np.float32),
         "small": np.arange(10, dtype=np.int64),
         "big_sliced": rng.integers(0, 1 << 62, (600, 1000), dtype=np.int64)}
    s = {"big_sliced": [[(0, 300), None], [(300, 300), None]]}
    d = fresh("big")
    tf = os.path.join(d, "tf")
    tb.write_bundle(tf, t, shards=2, compression="snappy", slices=s)
    out = os.path.join(d, "ckpt-1")
    doc = import_tf(tf, out)
    check_report(doc, tf, out, t, what="big")
    compare(out, t, "big")
    run("verify", out, rc=0)


# ---- bad inputs ----------------------------------------------------------------------------------

def listing(d):
    out = []
    for root, dirs, files in os.walk(d):
        for f in dirs + files:
            p = os.path.join(root, f)
            st = os.lstat(p)
            out.append((os.path.relpath(p, d), st.st_size, st.st_mtime_ns, stat.S_IFMT(st.st_mode)))
    return sorted(out)


def expect_refusal(name, tf_dir, tf, needles, flags=(), rc=1):
    """import-tf of the bundle at tf: exit rc, every needle in stderr, nothing written (the
    output directory stays empty, no temp file anywhere), the input directory unchanged."""
    out_dir = fresh("bad", name, "out")
    before = listing(tf_dir)
    code, so, se = run("import-tf", tf, os.path.join(out_dir, "ckpt-1"), *flags, rc=rc)
    print(f"  {name}: exit {code}: {se.strip()[:300]}")
    for n in needles:
        check(n in se, f"bad/{name}: the message does not name {n!r}: {se!r}")
    check(se.strip() != "", f"bad/{name}: no message")
    check(listing(out_dir) == [], f"bad/{name}: left {listing(out_dir)} in the output directory")
    check(listing(tf_dir) == before, f"bad/{name}: the input directory changed: "
          f"{set(listing(tf_dir)) ^ set(before)}")
    return se


def bad_bundle(name, tensors=None, **kw):
    d = fresh("bad", name, "tf")
    tf = os.path.join(d, "b")
    if tensors is None:
        tensors = {"w/.ATTRIBUTES/VARIABLE_VALUE": np.arange(12, dtype=np.float32).reshape(3, 4),
                   "layer_x": np.arange(5, dtype=np.int64), "layer_y": np.float64(2.5)}
    b = tb.write_bundle(tf, tensors, **kw)
    return d, tf, b


def case_bad():
    # the good base: several blocks and shards so that damage can hit any of them
    rng = np.random.default_rng(5)
    many = {f"t{i:03d}": rng.standard_normal(i % 4 + 1).astype(np.float32) for i in range(60)}

    # footer
    d, tf, b = bad_bundle("magic", many, block_size=200)
    tb.flip_byte(tf + ".index", -1, 0x01)
    expect_refusal("magic", d, tf, [".index"])
    d, tf, b = bad_bundle("footer-handle", many, block_size=200)
    tb.flip_byte(tf + ".index", b.footer_offset, 0x40)  # the metaindex handle's offset
    expect_refusal("footer-handle", d, tf, [".index"])
    # a truncated index, cut at several points
    d, tf, b = bad_bundle("truncated-index", many, block_size=200)
    size = b.index_size
    data0 = b.data_blocks()[3]
    for cut in (0, 1, 47, 48, data0.offset + data0.size // 2, b.block("index").offset + 3,
                b.footer_offset, b.footer_offset + 20, size - 8, size - 1):
        shutil.copy(tf + ".index", tf + ".index.good")
        tb.truncate(tf + ".index", cut)
        os.rename(tf + ".index.good", tf + ".index.keep")
        expect_refusal(f"truncated-index-{cut}", d, tf, [".index"])
        os.replace(tf + ".index.keep", tf + ".index")
    # block CRCs: a data block, the index block, the metaindex block, a block's type byte
    for kind, delta, label in (("data", 1, "block-crc-data"), ("index", 2, "block-crc-index"),
                               ("metaindex", 0, "block-crc-metaindex")):
        d, tf, b = bad_bundle(label, many, block_size=200)
        blk = b.data_blocks()[5] if kind == "data" else b.block(kind)
        tb.flip_byte(tf + ".index", blk.offset + min(delta, blk.size - 1), 0x10)
        expect_refusal(label, d, tf, ["block"])
    d, tf, b = bad_bundle("block-type-byte", many, block_size=200)
    blk = b.data_blocks()[2]
    tb.flip_byte(tf + ".index", blk.offset + blk.size, 0x01)  # type 0 -> 1, CRC now wrong
    expect_refusal("block-type-byte", d, tf, ["block"])
    d, tf, b = bad_bundle("block-crc-trailer", many, block_size=200)
    tb.flip_byte(tf + ".index", b.data_blocks()[0].offset + b.data_blocks()[0].size + 2, 0x01)
    expect_refusal("block-crc-trailer", d, tf, ["block"])

    # bad Snappy data with a correct CRC; an unknown block type with a correct CRC
    def snappy_hook(how):
        def hook(kind, i, stored, btype):
            if kind != "data" or i != 1:
                return stored, btype
            if how == "cut":
                return stored[:len(stored) // 2], tb.TYPE_SNAPPY
            if how == "huge":  # claims 4 GiB uncompressed
                return b"\xff\xff\xff\xff\x0f" + stored[5:], tb.TYPE_SNAPPY
            if how == "raw-as-snappy":
                return stored, tb.TYPE_SNAPPY
            return stored, 7  # unknown type
        return hook

    for how in ("cut", "huge", "raw-as-snappy", "type7"):
        label = f"snappy-{how}"
        d, tf, b = bad_bundle(label, many, block_size=200,
                              compression=None if how == "raw-as-snappy" else "snappy",
                              stored_hook=snappy_hook(how))
        expect_refusal(label, d, tf, ["block"])
    # a Snappy block whose contents are not a block (restart count beyond its size)
    d, tf, b = bad_bundle("snappy-garbage", many, block_size=200, compression="snappy",
                          stored_hook=lambda k, i, s, t: (tb.snappy_compress(b"\xff" * 64),
                                                          tb.TYPE_SNAPPY) if k == "data" and i == 2
                          else (s, t))
    expect_refusal("snappy-garbage", d, tf, ["block"])

    # tensor data
    d, tf, b = bad_bundle("tensor-crc", many, shards=3)
    path, off, n = b.data_entry("t017")
    tb.flip_byte(path, off + n - 1, 0x80)
    expect_refusal("tensor-crc", d, tf, ["t017"])
    d, tf, b = bad_bundle("truncated-shard", many, shards=3)
    path, off, n = b.data_entry("t059")
    tb.truncate(path, off + n - 1)
    expect_refusal("truncated-shard", d, tf, ["t059"])
    d, tf, b = bad_bundle("missing-shard", many, shards=3)
    os.unlink(b.data_paths[1])
    expect_refusal("missing-shard", d, tf, [os.path.basename(b.data_paths[1])])
    d, tf, b = bad_bundle("num-shards-larger", many, header={"num_shards": 4}, shards=3)
    expect_refusal("num-shards-larger", d, tf, ["data-00000-of-00004"])
    d, tf, b = bad_bundle("num-shards-smaller", many, header={"num_shards": 2}, shards=3)
    expect_refusal("num-shards-smaller", d, tf, ["data-00000-of-00002"])
    d, tf, b = bad_bundle("num-shards-zero", many, header={"num_shards": 0})
    expect_refusal("num-shards-zero", d, tf, [".index"])

    def set_field(target, **fields):
        def hook(key, f):
            if key == target:
                f.update(fields)
            return f
        return hook

    d, tf, b = bad_bundle("shard-id", entry_hook=set_field(b"layer_x", shard_id=1))
    expect_refusal("shard-id", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("shard-id-negative", entry_hook=set_field(b"layer_x", shard_id=-1))
    expect_refusal("shard-id-negative", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("offset-beyond", entry_hook=set_field(b"layer_x", offset=100000))
    expect_refusal("offset-beyond", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("offset-huge", entry_hook=set_field(b"layer_x", offset=(1 << 63) - 8))
    expect_refusal("offset-huge", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("size-beyond", entry_hook=set_field(b"layer_y", size=1 << 40))
    expect_refusal("size-beyond", d, tf, ["layer_y"])
    d, tf, b = bad_bundle("size-short", entry_hook=set_field(b"layer_x", size=32))
    expect_refusal("size-short", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("size-long", entry_hook=set_field(b"layer_y", size=16))
    expect_refusal("size-long", d, tf, ["layer_y"])
    d, tf, b = bad_bundle("dtype-24", {"a": np.arange(3, dtype=np.int32),
                                       "odd/.ATTRIBUTES/VARIABLE_VALUE":
                                       Tensor(np.arange(4, dtype=np.int32), 24)})
    expect_refusal("dtype-24", d, tf, ["odd/.ATTRIBUTES/VARIABLE_VALUE"])
    d, tf, b = bad_bundle("dtype-24-skip", {"a": np.arange(3, dtype=np.int32),
                                            "odd": Tensor(np.arange(4, dtype=np.int32), 24)})
    code, so, se = run("import-tf", tf, os.path.join(fresh("bad", "dtype-24-skip", "out"), "c"),
                       "--skip-unsupported", "--json")
    print(f"  dtype-24-skip: exit {code}: {se.strip()[:200]} {so.strip()[:200]}")
    check(code in (0, 1), f"dtype-24-skip: exit {code}")

    # dtypes mpickpt lacks: an error naming the key, or skipped and reported
    for label, bad in (("string", Tensor([b"abc", b"", b"\x00\xff"], "string", [3])),
                       ("complex64", np.array([1 + 2j, -3j], dtype=np.complex64)),
                       ("complex128", np.array([[1 + 2j]], dtype=np.complex128)),
                       ("string-scalar", Tensor([b"graph"], "string", []))):
        key = f"obj/{label}/.ATTRIBUTES/VARIABLE_VALUE"
        good = {"keep/a": np.arange(4, dtype=np.float32), "zz": np.int64(3)}
        d, tf, b = bad_bundle(f"unsupported-{label}", {**good, key: bad})
        expect_refusal(f"unsupported-{label}", d, tf, [key])
        out = os.path.join(fresh("bad", f"unsupported-{label}", "skip"), "ckpt-1")
        doc = import_tf(tf, out, "--skip-unsupported")
        check_report(doc, tf, out, {**good, key: bad}, skipped=[key], what=f"skip {label}")
        sk = (doc.get("skipped") or [{}])[0]
        want_dt = {"string": "DT_STRING", "string-scalar": "DT_STRING",
                   "complex64": "DT_COMPLEX64", "complex128": "DT_COMPLEX128"}[label]
        check(sk.get("dtype") == want_dt, f"skip {label}: skipped entry {sk}")
        compare(out, good, f"skip {label}")
    # a sliced tensor of a dtype we lack: skipped whole, its slices with it
    good = {"keep": np.arange(4, dtype=np.float32)}
    d, tf, b = bad_bundle("unsupported-sliced", {**good, "cplx": np.arange(6).astype(
        np.complex64).reshape(3, 2)}, slices={"cplx": [[(0, 1), None], [(1, 2), None]]})
    expect_refusal("unsupported-sliced", d, tf, ["cplx"])
    out = os.path.join(fresh("bad", "unsupported-sliced", "skip"), "ckpt-1")
    doc = import_tf(tf, out, "--skip-unsupported")
    check([s.get("name") for s in doc.get("skipped", [])] == ["cplx"],
          f"skip sliced complex: skipped {doc.get('skipped')}")
    compare(out, good, "skip sliced complex")

    # keys out of order, duplicated
    def swap(pairs):
        pairs[3], pairs[4] = pairs[4], pairs[3]
        return pairs

    # (the block is named; the key would be nicer, but the brief asks for key, block or file)
    d, tf, b = bad_bundle("unsorted", many, pairs_hook=swap)
    expect_refusal("unsorted", d, tf, ["block", "order"])
    d, tf, b = bad_bundle("unsorted-blocks", many, pairs_hook=swap, block_size=60)
    expect_refusal("unsorted-blocks", d, tf, ["block", "order"])
    # one entry per block: each block is in order, the index is not
    d, tf, b = bad_bundle("unsorted-across-blocks", many, pairs_hook=swap, block_size=1)
    expect_refusal("unsorted-across-blocks", d, tf, [".index", "order"])
    d, tf, b = bad_bundle("duplicate", many, pairs_hook=lambda p: p[:6] + [p[5]] + p[6:])
    expect_refusal("duplicate", d, tf, ["block", "order"])
    # one entry per block: the two copies in blocks of their own
    d, tf, b = bad_bundle("duplicate-across-blocks", many, block_size=1,
                          pairs_hook=lambda p: p[:6] + [p[5]] + p[6:])
    expect_refusal("duplicate-across-blocks", d, tf, [".index", "order"])
    # ... and index keys that stay in order (the first copy's block: the key itself, the
    # second's: the key + 00): only the data blocks, read one after another, show the duplicate
    seps = []

    def hidden(i, last, nxt):
        sep = tb.shortest_separator(last, nxt) if nxt else tb.short_successor(last)
        if seps and sep <= seps[-1]:
            sep = seps[-1] + b"\x00"
        seps.append(sep)
        return sep

    d, tf, b = bad_bundle("duplicate-hidden", many, block_size=1, index_key=hidden,
                          pairs_hook=lambda p: p[:6] + [p[5]] + p[6:])
    expect_refusal("duplicate-hidden", d, tf, [".index"])
    d, tf, b = bad_bundle("no-header", many, pairs_hook=lambda p: p[1:])
    expect_refusal("no-header", d, tf, [".index"])
    d, tf, b = bad_bundle("header-twice", many, pairs_hook=lambda p: p[:1] + p)
    expect_refusal("header-twice", d, tf, [".index"])
    d, tf, b = bad_bundle("empty-index", many, pairs_hook=lambda p: [])
    expect_refusal("empty-index", d, tf, [".index"])
    # an index key that is not above its block's last key
    d, tf, b = bad_bundle("index-key-low", many, block_size=200,
                          index_key=lambda i, last, nxt: b"t000" if i == 3 else
                          tb.shortest_separator(last, nxt) if nxt else tb.short_successor(last))
    expect_refusal("index-key-low", d, tf, [".index"])
    # an entry whose value is not a BundleEntryProto
    d, tf, b = bad_bundle("entry-garbage", many, pairs_hook=lambda p: [
        (k, b"\x0a\xff\xff" if k == b"t010" else v) for k, v in p])
    expect_refusal("entry-garbage", d, tf, ["t010"])

    # slices
    t = {"w": np.arange(24, dtype=np.float32).reshape(6, 4)}
    full = [[(0, 3), None], [(3, 3), None]]
    d, tf, b = bad_bundle("slice-missing", t, slices={"w": full},
                          entry_hook=lambda k, f: None if k == tb.slice_key("w", full[1]) else f)
    expect_refusal("slice-missing", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-overlap", t, slices={"w": [[(0, 4), None], [(3, 3), None]]})
    expect_refusal("slice-overlap", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-gap", t, slices={"w": [[(0, 2), None], [(3, 3), None]]})
    expect_refusal("slice-gap", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-outside", t, slices={"w": [[(0, 3), None], [(3, 3), None]]},
                          entry_hook=lambda k, f: dict(f, slices=[[(0, 3), None], [(3, 4), None]])
                          if k == b"w" else f)
    expect_refusal("slice-outside", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-shape", t, slices={"w": full},
                          entry_hook=lambda k, f: dict(f, shape=[3, 2])
                          if k == tb.slice_key("w", full[0]) else f)
    expect_refusal("slice-shape", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-dtype", t, slices={"w": full},
                          entry_hook=lambda k, f: dict(f, dtype=2)
                          if k == tb.slice_key("w", full[1]) else f)
    expect_refusal("slice-dtype", d, tf, ["w"])
    d, tf, b = bad_bundle("slice-crc", t, slices={"w": full})
    path, off, n = b.data_entry(tb.slice_key("w", full[1]))
    tb.flip_byte(path, off, 0x01)
    expect_refusal("slice-crc", d, tf, ["w"])

    # header: versions, endianness
    d, tf, b = bad_bundle("min-consumer", header={"min_consumer": 2})
    expect_refusal("min-consumer", d, tf, [".index"])
    d, tf, b = bad_bundle("bad-consumer", header={"bad_consumers": [1]})
    expect_refusal("bad-consumer", d, tf, [".index"])
    d, tf, b = bad_bundle("big-endian", header={"endianness": tb.ENDIAN_BIG})
    expect_refusal("big-endian", d, tf, [".index"])
    # shapes and names
    d, tf, b = bad_bundle("not-utf8", {"ok": np.arange(2, dtype=np.int8),
                                       b"bad\xff\xfename": np.arange(3, dtype=np.int8)})
    se = expect_refusal("not-utf8", d, tf, ["bad"])
    check("utf-8" in se.lower(), f"not-utf8: the message does not say UTF-8: {se!r}")
    d, tf, b = bad_bundle("key-too-long", {"ok": np.int8(1), "k" * 5000: np.int8(2)})
    expect_refusal("key-too-long", d, tf, ["kkkkkkkk"])
    d, tf, b = bad_bundle("key-nul", {"ok": np.int8(1), b"nul\x00inside": np.int8(2)})
    expect_refusal("key-nul", d, tf, ["nul"])
    d, tf, b = bad_bundle("dims-17", {"deep": np.zeros((1,) * 17, np.float32)})
    expect_refusal("dims-17", d, tf, ["deep"])
    d, tf, b = bad_bundle("dims-16-ok", {"deep": np.arange(2.0).reshape((1,) * 15 + (2,))})
    out = os.path.join(fresh("bad", "dims-16-ok", "out"), "ckpt-1")
    import_tf(tf, out)
    compare(out, {"deep": np.arange(2.0).reshape((1,) * 15 + (2,))}, "16 dimensions")
    d, tf, b = bad_bundle("dim-negative", entry_hook=set_field(b"layer_x", shape=[-5]))
    expect_refusal("dim-negative", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("dim-negative-zero-size",
                          entry_hook=set_field(b"layer_x", shape=[-1, 0]))
    expect_refusal("dim-negative-zero-size", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("dims-overflow",
                          entry_hook=set_field(b"layer_x", shape=[1 << 32, 1 << 32]))
    expect_refusal("dims-overflow", d, tf, ["layer_x"])
    d, tf, b = bad_bundle("unknown-rank",
                          entry_hook=set_field(b"layer_x", unknown_rank=True, shape=[]))
    expect_refusal("unknown-rank", d, tf, ["layer_x"])

    # not regular files: an index or a shard that is a symlink, a FIFO, a directory
    d, tf, b = bad_bundle("index-symlink")
    os.rename(tf + ".index", tf + ".real-index")
    os.symlink(os.path.basename(tf) + ".real-index", tf + ".index")
    expect_refusal("index-symlink", d, tf, [".index"])
    d, tf, b = bad_bundle("shard-symlink")
    os.rename(b.data_paths[0], tf + ".real-data")
    os.symlink(os.path.basename(tf) + ".real-data", b.data_paths[0])
    expect_refusal("shard-symlink", d, tf, [os.path.basename(b.data_paths[0])])
    d, tf, b = bad_bundle("index-fifo")
    os.unlink(tf + ".index")
    os.mkfifo(tf + ".index")
    expect_refusal("index-fifo", d, tf, [".index"])
    d, tf, b = bad_bundle("shard-fifo")
    os.unlink(b.data_paths[0])
    os.mkfifo(b.data_paths[0])
    expect_refusal("shard-fifo", d, tf, [os.path.basename(b.data_paths[0])])
    d, tf, b = bad_bundle("index-dir")
    os.unlink(tf + ".index")
    os.mkdir(tf + ".index")
    expect_refusal("index-dir", d, tf, [".index"])
    d = fresh("bad", "no-index", "tf")
    expect_refusal("no-index", d, os.path.join(d, "nothing"), ["nothing.index"])

    # an existing output: refused without --force, untouched; replaced with it
    d, tf, b = bad_bundle("exists")
    out_dir = fresh("bad", "exists", "out")
    out = os.path.join(out_dir, "ckpt-1")
    import_tf(tf, out)
    before = listing(out_dir)
    contents = {f: open(os.path.join(out_dir, f), "rb").read() for f in os.listdir(out_dir)}
    t2 = {"other": np.arange(7, dtype=np.uint16)}
    tf2 = os.path.join(fresh("bad", "exists", "tf2"), "b")
    tb.write_bundle(tf2, t2)
    code, so, se = run("import-tf", tf2, out, rc=1)
    print(f"  exists: exit {code}: {se.strip()[:300]}")
    check(out in se or "ckpt-1" in se, f"exists: the message does not name the output: {se!r}")
    check(listing(out_dir) == before and all(
        open(os.path.join(out_dir, f), "rb").read() == c for f, c in contents.items()),
        "exists: the existing checkpoint changed")
    import_tf(tf2, out, "--force")
    compare(out, t2, "exists --force")
    # a failing import with --force leaves the old checkpoint in place
    before = listing(out_dir)
    d, tfbad, _ = bad_bundle("exists-force-bad", many, shards=3)
    os.unlink(_.data_paths[2])
    run("import-tf", tfbad, out, "--force", rc=1)
    check(listing(out_dir) == before, "exists --force of a bad bundle: the output changed")
    compare(out, t2, "exists --force of a bad bundle")
    # usage errors: exit 2
    run("import-tf", rc=2)
    run("import-tf", tf, rc=2)
    run("import-tf", tf, out + "x", "--counter", "many", rc=2)


# ---- every byte of an index flipped, every length cut ---------------------------------------------

def case_flips():
    """Every single-byte change of a small index (several blocks, restarts every 4 entries, a
    sliced tensor; raw and Snappy) and every truncation of it: the import either refuses (exit
    1, a message, nothing written) or, where the byte is not covered by a checksum (the
    footer's padding), imports exactly the original tensors. Never a crash, a hang, another
    exit code or a sanitizer report."""
    rng = np.random.default_rng(99)
    t = {f"layer{i}/w": rng.standard_normal(i % 3 + 1).astype(np.float32) for i in range(10)}
    t["grid"] = np.arange(12, dtype=np.int16).reshape(3, 4)
    s = {"grid": [[(0, 1), None], [(1, 2), None]]}
    for comp in (None, "snappy"):
        tag = comp or "raw"
        d = fresh("flips", tag)
        tf = os.path.join(d, "b")
        b = tb.write_bundle(tf, t, shards=2, slices=s, block_size=128, restart_interval=4,
                            compression=comp)
        check(len(b.data_blocks()) >= 3, f"flips {tag}: {len(b.data_blocks())} data blocks")
        with open(tf + ".index", "rb") as f:
            good = f.read()
        out_dir = fresh("flips", tag + "-out")
        out = os.path.join(out_dir, "ckpt-1")
        refused = accepted = 0

        def attempt(label, data):
            nonlocal refused, accepted
            with open(tf + ".index", "wb") as f:
                f.write(data)
            code, so, se = run("import-tf", tf, out)
            if code == 0:
                accepted += 1
                compare(out, t, f"flips {tag} {label}: accepted")
                for f in os.listdir(out_dir):
                    os.unlink(os.path.join(out_dir, f))
            else:
                refused += 1
                check(code == 1 and se.strip() and os.listdir(out_dir) == [],
                      f"flips {tag} {label}: exit {code}, message {se!r}, left "
                      f"{os.listdir(out_dir)}")

        for i in range(len(good)):
            bad = bytearray(good)
            bad[i] ^= 0x01 if i % 2 else 0x80
            attempt(f"byte {i}", bytes(bad))
        for n in range(len(good)):
            attempt(f"cut at {n}", good[:n])
        with open(tf + ".index", "wb") as f:
            f.write(good)
        # only the footer's padding may change unnoticed
        pad = len(good) - 48 + len(tb.encode_handle(b.block("metaindex").offset,
                                                    b.block("metaindex").size) +
                                    tb.encode_handle(b.block("index").offset,
                                                     b.block("index").size))
        check(accepted <= len(good) - 8 - pad, f"flips {tag}: {accepted} changed indexes "
              f"accepted, more than the {len(good) - 8 - pad} padding bytes")
        print(f"  flips {tag}: {len(good)} bytes: {refused} refused, {accepted} accepted")


# ---- a directory with TensorFlow's `checkpoint` file ---------------------------------------------

def case_directory():
    rng = np.random.default_rng(12)
    one = {"v/.ATTRIBUTES/VARIABLE_VALUE": np.arange(4, dtype=np.float32),
           "save_counter/.ATTRIBUTES/VARIABLE_VALUE": np.int64(1)}
    two = {"v/.ATTRIBUTES/VARIABLE_VALUE": rng.standard_normal(4).astype(np.float32),
           "save_counter/.ATTRIBUTES/VARIABLE_VALUE": np.int64(2)}
    evil = {"evil": np.int8(66)}

    def setup(label, newest, write_file=True):
        d = fresh("dir", label, "train")
        tb.write_bundle(os.path.join(d, "ckpt-1"), one)
        tb.write_bundle(os.path.join(d, "ckpt-2"), two)
        other = fresh("dir", label, "evil")
        tb.write_bundle(os.path.join(other, "ckpt-9"), evil)
        if write_file:
            tb.write_checkpoint_file(d, newest, ["ckpt-1", "ckpt-2"])
        return d

    for label, newest in (("relative", "ckpt-2"), ("older", "ckpt-1"),
                          ("absolute", "/gone/elsewhere/train/ckpt-2"),
                          ("dot-slash", "./ckpt-2")):
        d = setup(label, newest)
        out = os.path.join(fresh("dir", label, "out"), "ckpt-1")
        for arg in (d, d + "/"):
            doc = import_tf(arg, out, "--force")
            want = one if newest.endswith("ckpt-1") else two
            compare(out, want, f"dir {label} ({arg})")
            # the argument as given (as for a prefix), and the bundle it resolved to
            bundle = os.path.join(d, "ckpt-" + newest[-1])
            check(doc.get("input") == arg and os.path.normpath(doc.get("bundle", "")) == bundle,
                  f"dir {label}: --json input {doc.get('input')!r} bundle "
                  f"{doc.get('bundle')!r}, expected {arg!r} and {bundle!r}")
            so = run("import-tf", "--force", arg, out)[1]
            check(f" from {doc.get('bundle')} into {out}" in so,
                  f"dir {label}: the summary line names the bundle: {so!r}")
    # TensorFlow 1's file, no timestamps
    d = setup("tf1", "ckpt-2", write_file=False)
    tb.write_checkpoint_file(d, "ckpt-2", ["ckpt-2"], timestamps=False)
    out = os.path.join(fresh("dir", "tf1", "out"), "ckpt-1")
    import_tf(d, out)
    compare(out, two, "dir tf1")
    # refusals: the file names a checkpoint outside the directory, none, garbage; the file is
    # missing, a symlink, a FIFO, a directory; the named checkpoint is missing
    for label, newest, needles in (("escape", "../evil/ckpt-9", ["ckpt-9"]),
                                   ("missing-named", "ckpt-7", ["ckpt-7"])):
        d = setup(label, newest)
        se = expect_refusal(f"dir-{label}", d, d, needles)
        check("evil" not in se or "ckpt-9" in se, f"dir {label}: {se!r}")
    for label, content in (("empty-file", ""), ("garbage", "\x00\xff not a proto\n"),
                           ("no-path", 'all_model_checkpoint_paths: "ckpt-1"\n'),
                           ("empty-path", 'model_checkpoint_path: ""\n')):
        d = setup(label, "ckpt-2", write_file=False)
        with open(os.path.join(d, "checkpoint"), "w", errors="surrogateescape") as f:
            f.write(content)
        expect_refusal(f"dir-{label}", d, d, ["checkpoint"])
    d = setup("no-file", "ckpt-2", write_file=False)
    expect_refusal("dir-no-file", d, d, ["checkpoint"])
    d = setup("file-symlink", "ckpt-2", write_file=False)
    tb.write_checkpoint_file(os.path.dirname(d), "train/ckpt-2")
    os.symlink("../checkpoint", os.path.join(d, "checkpoint"))
    expect_refusal("dir-file-symlink", d, d, ["checkpoint"])
    d = setup("file-fifo", "ckpt-2", write_file=False)
    os.mkfifo(os.path.join(d, "checkpoint"))
    expect_refusal("dir-file-fifo", d, d, ["checkpoint"])
    d = setup("file-dir", "ckpt-2", write_file=False)
    os.mkdir(os.path.join(d, "checkpoint"))
    expect_refusal("dir-file-dir", d, d, ["checkpoint"])


# ---- export --------------------------------------------------------------------------------------

def read_back(tfout, what):
    try:
        return tb.read_bundle(tfout)
    except (tb.FormatError, OSError, ValueError) as e:
        check(False, f"{what}: tfbundle.read_bundle({tfout}): {e}")
        return {}, {}


def compare_bundle(got, hdr, want, what):
    """tensors read by read_bundle == want (name -> value as given to write_bundle)."""
    names = {k.decode(errors="replace") for k in got}
    check(names == {name_of(k) for k in want},
          f"{what}: names {sorted(names ^ {name_of(k) for k in want})[:10]} differ")
    for k, v in want.items():
        g = got.get(k.encode() if isinstance(k, str) else k)
        if g is None:
            continue
        wb, ws = bits_of(v)
        dt = tb.DT_MPICKPT.get(hdr.get("dtypes", {}).get(k.encode() if isinstance(k, str) else k))
        check(dt == dtype_of(v), f"{what}: '{name_of(k)}' exported as {dt}, expected "
              f"{dtype_of(v)}")
        check(g.shape == ws and g.tobytes() == wb, f"{what}: '{name_of(k)}' values differ")


def export_roundtrip(src, want, tag):
    """export --format tf of the checkpoint at src (holding `want`), read by tfbundle, imported
    again; both equal `want`."""
    d = fresh(tag)
    tfout = os.path.join(d, "exported")
    run("export", "--format", "tf", src, tfout, rc=0)
    files = sorted(os.listdir(d))
    check(files == ["exported.data-00000-of-00001", "exported.index"],
          f"{tag}: export wrote {files}")
    got, hdr = read_back(tfout, tag)
    check(hdr.get("num_shards") == 1 and hdr.get("endianness") == 0,
          f"{tag}: exported header {hdr}")
    compare_bundle(got, hdr, want, tag)
    # byte for byte what tfbundle writes for the same tensors with TensorFlow's settings (one
    # shard, 256 KiB blocks, restarts every 16, no compression, entries back to back in key
    # order): the layout TensorFlow's BundleWriter gives (checked on bundles it wrote)
    if got:
        mine = tb.write_bundle(os.path.join(d, "tfbundle"), tb.as_written(got, hdr))
        for suffix in (".index", ".data-00000-of-00001"):
            with open(tfout + suffix, "rb") as f:
                theirs = f.read()
            with open(mine.prefix + suffix, "rb") as f:
                ours = f.read()
            at = next((i for i, (x, y) in enumerate(zip(theirs, ours)) if x != y),
                      min(len(theirs), len(ours)))
            check(theirs == ours, f"{tag}: exported {suffix} differs from tfbundle's at byte {at} "
                  f"({len(theirs)} bytes, tfbundle {len(ours)}): {theirs[at:at + 16].hex()} vs "
                  f"{ours[at:at + 16].hex()}")
        os.unlink(mine.index_path)
        os.unlink(mine.data_paths[0])
    out = os.path.join(d, "again", "ckpt-1")
    os.makedirs(os.path.dirname(out))
    doc = import_tf(tfout, out)
    check_report(doc, tfout, out, want, what=tag + " reimport")
    compare(out, want, tag + " reimport")
    # exists: refused, untouched
    before = listing(d)
    run("export", "--format", "tf", src, tfout, rc=1)
    check(listing(d) == before, f"{tag}: a refused export changed its output")
    return got, hdr


def export_force_fails(small_src):
    """export --format tf --force over an existing bundle, failing on the index (a file size
    limit the data file stays under): exit 1, the old bundle as it was, no temp file."""
    d = fresh("export-force-fail")
    out = os.path.join(d, "out")
    run("export", "--format", "tf", small_src, out, rc=0)
    before = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
    limit = 2 * max(len(v) for v in before.values())
    # names that share no prefix: an index far above the limit, 1 byte of data per tensor
    rng = np.random.default_rng(31)
    names = {"".join(chr(97 + c) for c in rng.integers(0, 26, 200)): np.int8(i % 100)
             for i in range(limit // 100)}
    s = fresh("export-force-fail-src")
    tb.write_bundle(os.path.join(s, "tf"), names)
    big = os.path.join(s, "ckpt-1")
    import_tf(os.path.join(s, "tf"), big)

    def fsize_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = subprocess.run([CLI, "export", "--format", "tf", "--force", big, out],
                       capture_output=True, timeout=TIMEOUT, env=cli_env(), preexec_fn=fsize_limit)
    se = p.stderr.decode("utf-8", "replace")
    print(f"  export-force-fail: exit {p.returncode}: {se.strip()[:200]}")
    check(p.returncode == 1 and "out.index" in se,
          f"export-force-fail: exit {p.returncode}, stderr {se!r}")
    after = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
    check(after == before, f"export-force-fail: the old bundle changed: {sorted(before)} -> "
          f"{sorted(after)}")


def case_export():
    rng = np.random.default_rng(29)
    t = every_dtype(rng)
    g, s = grid_tensors(rng)
    t.update(g)
    d = fresh("src")
    tf = os.path.join(d, "tf")
    tb.write_bundle(tf, t, shards=3, compression="snappy", slices=s, block_size=400)
    src = os.path.join(d, "ckpt-1")
    import_tf(tf, src)
    compare(src, t, "export source")
    export_roundtrip(src, t, "export")
    export_force_fails(src)
    # a byte-level look at what export wrote: the header, sorted unique keys
    hdr, entries, blocks = tb.read_entries(os.path.join(OUT, "export", "exported"))
    keys = [k for k, _ in entries]
    check(keys == sorted(set(keys)), "export: keys not sorted or unique")
    check(hdr.get("producer", 0) >= 1 and hdr.get("min_consumer", 0) == 0,
          f"export: header version {hdr}")
    nslices = sum(1 for k in keys if k.startswith(b"\x00"))
    print(f"  export: {len(entries)} entries, {len(blocks)} blocks, {nslices} slice entries")
    # an index of several 256 KiB blocks: 3000 tensors with long names (that share little: prefix
    # compression would make them small); the bundle tfbundle
    # wrote is what export must write again, byte for byte
    many = {f"v{i:05d}/model/{'deep/' * 12}layer/kernel/.ATTRIBUTES/VARIABLE_VALUE":
            np.full((i % 3,), i, np.int32) for i in range(3000)}
    d = fresh("many-src")
    tf = os.path.join(d, "tf")
    b = tb.write_bundle(tf, many)
    check(len(b.data_blocks()) >= 2, f"export many: {len(b.data_blocks())} data blocks")
    src = os.path.join(d, "ckpt-1")
    import_tf(tf, src)
    export_roundtrip(src, many, "export-many")
    with open(tf + ".index", "rb") as f1, \
            open(os.path.join(OUT, "export-many", "exported.index"), "rb") as f2:
        check(f1.read() == f2.read(), "export many: the exported index is not the one tfbundle "
              "wrote")


def pkg_state(rank, size, fill):
    """The package's state at `size` ranks (pkgwrite): shards 1-d and 2-d, replicated arrays."""
    import mpickpt

    rng = np.random.default_rng(404)
    whole = {"model/emb": rng.standard_normal((10, 6)).astype(np.float32),
             "model/ids": np.arange(13, dtype=np.int64) * -7}
    rep = {"model/dense/kernel": rng.standard_normal((4, 3)).astype(np.float64),
           "model/dense/bias": np.arange(3, dtype=np.int32),
           "flags": np.array([True, False, True])}
    state = {"model": {}, "flags": None, "epoch": 3}
    pr, pc = (2, 2) if size == 4 else (size, 1)
    gr, gc = rank // pc, rank % pc
    a0, a1 = gr * 10 // pr, (gr + 1) * 10 // pr
    c0, c1 = gc * 6 // pc, (gc + 1) * 6 // pc
    emb = np.ascontiguousarray(whole["model/emb"][a0:a1, c0:c1])
    i0, i1 = rank * 13 // size, (rank + 1) * 13 // size
    ids = np.ascontiguousarray(whole["model/ids"][i0:i1])
    if fill:
        emb[...] = -1
        ids[...] = -1
    state["model"]["emb"] = mpickpt.Shard(emb, (10, 6), (a0, c0))
    state["model"]["ids"] = mpickpt.Shard(ids, (13,), (i0,))
    state["model"]["dense"] = {"kernel": rep["model/dense/kernel"].copy(),
                               "bias": rep["model/dense/bias"].copy()}
    state["flags"] = rep["flags"].copy()
    return state, {**whole, **rep}


def case_pkgwrite():
    from mpi4py import MPI

    import mpickpt

    comm = MPI.COMM_WORLD
    state, _ = pkg_state(comm.rank, comm.size, False)
    with mpickpt.CheckpointManager(os.path.join(OUT, "pkg")) as mgr:
        mgr.save(77, state, epoch=3)
    if comm.rank == 0:
        print(f"wrote {os.path.join(OUT, 'pkg')} at {comm.size} ranks", flush=True)


def case_export_pkg():
    import mpickpt

    writer = sys.argv[3]
    src = os.path.join(writer, "pkg", "ckpt-1")
    _, want = pkg_state(0, 4, False)
    with mpickpt.open(src) as ck:
        check(set(ck) == set(want), f"export_pkg: the package's checkpoint holds {sorted(ck)}")
    ins, _ = run_json("inspect", "--json", src)
    check(any(x.get("kind") == "partitioned" and len(x.get("pieces", [])) == 4
              for x in ins.get("tensors", []) if x.get("name") == "model/emb"),
          "export_pkg: model/emb is not partitioned in 4 pieces")
    # every tensor, the package's own record of plain values included (it is a tensor too)
    every = dict(want)
    for x in ins.get("tensors", []):
        if x["name"] not in every:
            doc, _ = run_json("dump", "--json", src, x["name"])
            every[x["name"]] = np.array(doc.get("values", []), dtype=x["dtype"]).reshape(
                x["shape"])
    got, hdr = export_roundtrip(src, every, "export_pkg")


def restore_tensors():
    """(tensors, slices) of the bundle the restore tests import: TF2 names, a dtype each, two
    partitioned tensors (a 2x2 grid of uneven slices, a 1-d split in three)."""
    rng = np.random.default_rng(77)
    t = {"model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE":
         special_floats(np.float32, 12, rng).reshape(4, 3),
         "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE": special_floats(np.float64, 3, rng),
         "model/half/.ATTRIBUTES/VARIABLE_VALUE": special_floats(np.float16, 5, rng),
         "model/bits/.ATTRIBUTES/VARIABLE_VALUE": int_extremes(np.uint16, (2, 2), rng),
         "model/mask/.ATTRIBUTES/VARIABLE_VALUE": np.array([True, False, False, True]),
         "model/small/.ATTRIBUTES/VARIABLE_VALUE": int_extremes(np.int8, (6,), rng),
         "save_counter/.ATTRIBUTES/VARIABLE_VALUE": np.int64(4),
         "model/emb/.ATTRIBUTES/VARIABLE_VALUE": rng.standard_normal((10, 6)).astype(np.float32),
         "model/ids/.ATTRIBUTES/VARIABLE_VALUE": int_extremes(np.int64, (7,), rng)}
    s = {"model/emb/.ATTRIBUTES/VARIABLE_VALUE":
         [[(0, 4), (0, 3)], [(0, 4), (3, 3)], [(4, 6), (0, 3)], [(4, 6), (3, 3)]],
         "model/ids/.ATTRIBUTES/VARIABLE_VALUE": [[(0, 2)], [(2, 4)], [(6, 1)]]}
    return t, s


def case_restore_prep():
    t, s = restore_tensors()
    d = fresh("tf")
    tf = os.path.join(d, "model.ckpt")
    tb.write_bundle(tf, t, shards=2, slices=s, compression="snappy", block_size=300)
    out = os.path.join(OUT, "ckpt", "ckpt-4")
    os.makedirs(os.path.dirname(out))
    import_tf(tf, out, "--counter", "4", "--epoch", "2", "--step", "31")
    compare(out, t, "restore_prep")


def nest(flat):
    """{'a/b/c': x} -> {'a': {'b': {'c': x}}} (the package joins keys with '/')."""
    root = {}
    for name, v in flat.items():
        node = root
        parts = name.split("/")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return root


def case_restore():
    from mpi4py import MPI

    import mpickpt

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size

    def die(kind, value, tb_):
        import traceback
        sys.stderr.write(f"[rank {rank}/{size}] FAILED:\n" +
                         "".join(traceback.format_exception(kind, value, tb_)))
        sys.stderr.flush()
        comm.Abort(1)

    sys.excepthook = die
    writer = sys.argv[3]
    ckdir = os.path.join(OUT, "ckpt")
    if rank == 0:  # a private copy: the readers at 1, 2, 4 and 8 ranks may run at once
        shutil.rmtree(ckdir, ignore_errors=True)
        shutil.copytree(os.path.join(writer, "ckpt"), ckdir)
    comm.Barrier()
    t, s = restore_tensors()
    flat, want = {}, {}
    for name, v in t.items():
        a = np.asarray(v)
        if name == "model/emb/.ATTRIBUTES/VARIABLE_VALUE":
            # a grid of this rank count's own (rows x 2 columns), not the bundle's slices
            pr = max(1, size // 2)
            pc = size // pr
            gr, gc = rank // pc, rank % pc
            r0, r1 = gr * 10 // pr, (gr + 1) * 10 // pr
            c0, c1 = gc * 6 // pc, (gc + 1) * 6 // pc
            local = np.full((r1 - r0, c1 - c0), -7, np.float32)
            flat[name] = mpickpt.Shard(local, a.shape, (r0, c0))
            want[name] = (local, a[r0:r1, c0:c1])
        elif name == "model/ids/.ATTRIBUTES/VARIABLE_VALUE":
            i0, i1 = rank * 7 // size, (rank + 1) * 7 // size  # empty blocks at 8 ranks
            local = np.full((i1 - i0,), -7, np.int64)
            flat[name] = mpickpt.Shard(local, a.shape, (i0,))
            want[name] = (local, a[i0:i1])
        else:
            local = np.zeros_like(a)
            local.reshape(-1).view(np.uint8)[...] = 0xA5
            flat[name] = local
            want[name] = (local, a)
    with mpickpt.CheckpointManager(ckdir) as mgr:
        info = mgr.restore(nest(flat))
    bad = []
    if (info.get("step"), info.get("epoch")) != (31, 2):
        bad.append(f"info {info}")
    for name, (got, exp) in want.items():
        if got.dtype != exp.dtype or got.shape != exp.shape or \
                np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(exp).tobytes():
            bad.append(f"'{name}': {got!r} expected {exp!r}")
    allbad = comm.allgather(bad)
    if rank == 0:
        for r, b in enumerate(allbad):
            for x in b:
                print(f"FAIL: rank {r}: {x}", file=sys.stderr)
        n = sum(len(b) for b in allbad)
        print(f"restore of an imported bundle on {size} ranks: "
              f"{'ok' if n == 0 else f'{n} failures'}", flush=True)
    sys.exit(1 if any(allbad) else 0)


CASES = {"roundtrip": case_roundtrip, "sliced": case_sliced, "multiblock": case_multiblock,
         "directory": case_directory, "flips": case_flips,
         "big": case_big, "bad": case_bad, "export": case_export, "export_pkg": case_export_pkg,
         "restore_prep": case_restore_prep, "pkgwrite": case_pkgwrite, "restore": case_restore}

if __name__ == "__main__":
    if CASE not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(CASES)}}} OUTDIR [WRITERDIR]")
    os.makedirs(OUT, exist_ok=True)
    CASES[CASE]()
    scriptcheck.finish(lambda c, f: f"import_tf {CASE}: {c} checks, {f} failures")
