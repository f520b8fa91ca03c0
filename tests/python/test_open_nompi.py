"""mpickpt.open() in a plain interpreter, without mpirun and without MPI: the checkpoints that
test_nm.py's writer made at 2 ranks (both layouts) read back by name. Checks .meta, the names
(PerRank components included), .json and .json_of_rank(r), slices across the writer's blocks,
`in` and get() for a missing name, verify(); on damaged copies: a flipped data byte (verify() and
the read of that tensor raise CorruptError, the others read fine), a truncated data file and a
flipped index byte (CorruptError at open), a missing checkpoint and a missing name
(NotFoundError). Finally, mpi4py.MPI was never imported.

Usage: python3 test_open_nompi.py OUTDIR WRITERDIR"""
import glob
import os
import shutil
import sys

import numpy as np

import mpickpt
from nompi import flip_byte
from nm_values import EPOCH, LAYOUTS, SHARDS, STEP, global_values, per_rank

WRITERS = 2


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    check(got.dtype == want.dtype and got.shape == want.shape,
          f"{what}: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
    check(got.tobytes() == want.tobytes(), f"{what}: values differ")


def raises(cls, fn, *needles):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        check(type(e) is cls, f"{type(e).__name__}({e}), expected {cls.__name__}")
        for n in needles:
            check(n in str(e), f"{cls.__name__} {str(e)!r} does not name {n!r}")
        return e
    raise AssertionError(f"no error, expected {cls.__name__}")


def read_all(prefix, layout):
    with mpickpt.open(prefix) as ck:
        m = ck.meta
        check((m["world_size"], m["step"], m["epoch"], m["layout"], m["save_counter"]) ==
              (WRITERS, STEP, EPOCH, layout, 1), f"meta {m}")
        names = set(SHARDS) | {"rep", "pr_arr", "pr_arr/parallel_component_1"}
        check(set(ck) == names and len(ck) == len(names), f"names {sorted(ck)}")
        check("v1" in ck and "nope" not in ck and ck.get("nope") is None, "in / get")
        check(ck.get("v1") is ck["v1"], "get of a name")
        e = raises(mpickpt.NotFoundError, lambda: ck["nope"], "'nope'", prefix)
        check(isinstance(e, LookupError), "NotFoundError is a LookupError")
        for name in SHARDS:
            a, g = ck[name], global_values(name)
            check(a.kind == "partitioned" and a.shape == g.shape and a.ndim == g.ndim, f"{a}")
            same_bits(a.read(), g, f"{name} whole")
            same_bits(np.asarray(a), g, f"{name} asarray")
            n0 = g.shape[0]
            for lo, hi in ((0, n0), (1, n0 - 1), (n0 // 3, 2 * n0 // 3 + 1), (n0 - 1, n0)):
                same_bits(a[lo:hi], g[lo:hi], f"{name}[{lo}:{hi}]")
            same_bits(a[n0 // 2], g[n0 // 2], f"{name}[{n0 // 2}]")
            same_bits(a[-1], g[-1], f"{name}[-1]")
            same_bits(a[::3], g[::3], f"{name}[::3]")
            same_bits(a[..., -1], g[..., -1], f"{name}[..., -1]")
            if g.ndim == 2:
                same_bits(a[2:4, 1:-1], g[2:4, 1:-1], f"{name}[2:4, 1:-1]")
                same_bits(a[:, 3], g[:, 3], f"{name}[:, 3]")
        same_bits(ck["rep"].read(), np.arange(6.0), "rep")
        for r in range(WRITERS):
            comp = ck["pr_arr" if r == 0 else f"pr_arr/parallel_component_{r}"]
            check(comp.kind == "component", f"{comp}")
            same_bits(comp.read(), per_rank(r)[0], f"pr_arr of rank {r}")
            doc = ck.json_of_rank(r)
            want = {f"pr_json/{k}": v for k, v in per_rank(r)[1].items()}
            want["pr_scalar"] = per_rank(r)[2]
            check(doc == want, f"json_of_rank({r}) = {doc}, expected {want}")
        check(ck.json_of_rank(WRITERS) is None, "json_of_rank of a rank the writer lacked")
        check(ck.json == {"epoch": 5}, f"json {ck.json}")
        ck.verify()


def copy_of(prefix, to):
    os.makedirs(to, exist_ok=True)
    for f in glob.glob(prefix + ".*"):
        shutil.copy(f, to)
    return os.path.join(to, os.path.basename(prefix))




def damaged(prefix, out):
    # a flipped byte at the start of the data of rank 1's file: found by verify() and by
    # reading the tensor it belongs to, not by opening
    import h5py

    p = copy_of(prefix, os.path.join(out, "flipped"))
    data = sorted(glob.glob(p + ".data-*"))[-1]
    with h5py.File(data, "r") as f:
        ds = sorted(n for n in f["packs"]) if "packs" in f else []
        name = f"/packs/{ds[0]}" if ds else "/tensors/grid"
        off = f[name].id.get_offset()
    flip_byte(data, off)
    with mpickpt.open(p) as ck:
        raises(mpickpt.CorruptError, ck.verify, os.path.basename(data))
        bad = []
        for name in ck:
            try:
                ck[name].read()
            except mpickpt.CorruptError as e:
                check(os.path.basename(data) in str(e), f"{e}")
                bad.append(name)
        check(len(bad) >= 1 and len(bad) < len(ck), f"corrupt reads: {bad}")
    # a truncated data file, a flipped index byte: refused at open
    p = copy_of(prefix, os.path.join(out, "truncated"))
    data = sorted(glob.glob(p + ".data-*"))[0]
    os.truncate(data, os.path.getsize(data) - 1)
    raises(mpickpt.CorruptError, lambda: mpickpt.open(p), os.path.basename(data))
    p = copy_of(prefix, os.path.join(out, "index"))
    flip_byte(p + ".index", os.path.getsize(p + ".index") // 2)
    raises(mpickpt.CorruptError, lambda: mpickpt.open(p), "ckpt-1.index")
    raises(mpickpt.NotFoundError, lambda: mpickpt.open(os.path.join(out, "nothing", "ckpt-1")),
           "nothing")
    return bad


def main():
    out, writer = sys.argv[1], sys.argv[2]
    for layout in LAYOUTS:
        prefix = os.path.join(writer, layout, "ckpt-1")
        read_all(prefix, layout)
        bad = damaged(prefix, os.path.join(out, layout))
        print(f"{layout}: read without MPI; a flipped byte spoiled {bad}", flush=True)
    check("mpi4py.MPI" not in sys.modules, "mpi4py.MPI was imported")
    print(f"mpi4py imported at all: {'mpi4py' in sys.modules}")


if __name__ == "__main__":
    main()
