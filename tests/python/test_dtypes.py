"""Every dtype round trip, bit for bit: NumPy (float16/32/64, int8..64, uint8..64, bool) or PyTorch
(float16, bfloat16, float32, float64, int8..64, uint8, bool) arrays of shapes 0-d to 4-d, empty
and odd-sized, with NaN payloads, +-inf, -0.0 and subnormals; replicated, PerRank and Shard; small
ones (packed into /packs/rank-N in the per-rank and per-node layouts) and ones over the pack
limit; the three layouts (per-node: nodes of MPICKPT_RANKS_PER_NODE ranks, or one). Saved with CheckpointManager.save, clobbered, restored in place (the same objects hold the
values, views leave their base's other elements alone), then read back by name with
mpickpt.open(): whole, [a:b], [i], [-1], [..., j], np.asarray, .to_torch().

Usage: mpirun -np N python3 test_dtypes.py OUTDIR numpy|torch"""
import glob
import os
import sys

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, rank, size

import mpickpt

MODE = sys.argv[2]
if MODE == "torch":
    torch = pc.need_torch()

SHAPES = [(), (0,), (2, 0, 3), (1,), (7,), (3, 5), (2, 3, 5), (2, 1, 3, 2)]
# Bit patterns that a conversion or a canonicalizing copy would change: quiet NaN, negative NaN,
# signalling NaN with a payload, +inf, -inf, -0.0, the smallest subnormal, the largest finite.
SPECIAL = {
    2: [0x7E00, 0xFE00, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x7BFF],
    4: [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000, 1, 0x7F7FFFFF],
    8: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF0000000000000,
        0xFFF0000000000000, 0x8000000000000000, 1, 0x7FEFFFFFFFFFFFFF],
}
SPECIAL_BF16 = [0x7FC0, 0xFFC0, 0x7F81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x7F7F]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def np_values(dtype, shape, seed, bf16=False):
    """Random bits of `dtype` (a NumPy dtype; bf16: uint16 holding bfloat16 bits) with the special
    patterns first."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    u = UINT[dtype.itemsize]
    bits = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True)
    special = SPECIAL_BF16 if bf16 else SPECIAL.get(dtype.itemsize) if dtype.kind == "f" else None
    if dtype.kind in "iu":
        special = [np.iinfo(dtype).min, np.iinfo(dtype).max, 0]
        special = [int(np.array(v, dtype=dtype).view(u)) for v in special]
    k = min(n, len(special))
    bits[:k] = np.array(special[:k], dtype=u)
    return bits.view(dtype if not bf16 else np.uint16).reshape(shape)


if MODE == "numpy":
    DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
              "uint16", "uint32", "uint64", "bool"]

    def make(dtype, shape, seed):
        return np_values(dtype, shape, seed)

    def to_numpy(x):
        return x
else:
    DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
              "uint8", "bool"]

    def make(dtype, shape, seed):
        if dtype == "bfloat16":
            bits = np_values(np.uint16, shape, seed, bf16=True)
            return torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(np_values(dtype, shape, seed).copy())

    def to_numpy(x):
        """What mpickpt.open gives for a tensor: its values, bfloat16 as uint16 bits."""
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()


def _seed(parts):
    """A seed from the text of `parts`, the same in every process (hash() of str is not)."""
    import zlib

    return zlib.crc32(repr(parts).encode())


def shard_bounds(n, ranks, r):
    return r * n // ranks, (r + 1) * n // ranks


def build():
    """The state, and what every array of it must hold (expected values by name, for any rank:
    replicated ones the same everywhere, per-rank ones of every rank, shards as global arrays)."""
    state, expect = {}, {}
    for dt in DTYPES:
        sub = {}
        for shape in SHAPES:
            key = "x".join(map(str, shape)) or "scalar"
            sub[key] = make(dt, shape, _seed((MODE, dt, shape)))
            expect[f"{dt}/{key}"] = sub[key].clone() if MODE == "torch" else sub[key].copy()
        # a view into a larger buffer: restore writes its elements only
        base = make(dt, (20,), _seed((MODE, dt, "base")))
        sub["view"] = base[3:10]
        expect[f"{dt}/view"] = sub["view"].clone() if MODE == "torch" else sub["view"].copy()
        sub["_base"] = base  # not in the state (below): kept to check its other elements
        # per-rank values: rank r's own
        for r in range(size):
            expect[f"{dt}/per_rank#{r}"] = make(dt, (5,), _seed((MODE, dt, "pr", r)))
        sub["per_rank"] = mpickpt.PerRank(make(dt, (5,), _seed((MODE, dt, "pr", rank))))
        # a 1-d tensor partitioned unevenly over the ranks
        n = 5 * size + 2
        glob_ = make(dt, (n,), _seed((MODE, dt, "shard")))
        lo, hi = shard_bounds(n, size, rank)
        local = glob_[lo:hi].clone() if MODE == "torch" else glob_[lo:hi].copy()
        sub["shard"] = mpickpt.Shard(local, (n,), (lo,))
        expect[f"{dt}/shard"] = glob_
        state[dt] = sub
    # over the pack limit (1 MiB): datasets of their own, with block checksums
    big_dt = "float32"
    state["big"] = {"a": make(big_dt, ((1 << 18) + 3,), _seed((MODE, "big")))}
    expect["big/a"] = state["big"]["a"].clone() if MODE == "torch" else state["big"]["a"].copy()
    bases = {dt: state[dt].pop("_base") for dt in DTYPES}
    return state, expect, bases


def arrays_of(state):
    """(name, array) of every array in the state, with Shard/PerRank unwrapped."""
    out = []
    for dt, sub in state.items():
        for k, v in sub.items():
            if isinstance(v, mpickpt.PerRank):
                v = v.value
            elif isinstance(v, mpickpt.Shard):
                v = v.local
            out.append((f"{dt}/{k}", v))
    return out


def clobber(x):
    a = to_numpy(x)
    if a.dtype == np.bool_:
        np.logical_not(a, out=a)
    else:
        a.reshape(-1).view(np.uint8)[...] ^= 0xFF


def local_expect(name, expect):
    """What this rank's array `name` must hold."""
    if name.endswith("/per_rank"):
        return expect[f"{name}#{rank}"]
    if name.endswith("/shard"):
        n = expect[name].shape[0]
        lo, hi = shard_bounds(n, size, rank)
        return expect[name][lo:hi]
    return expect[name]


def check_open(path, expect, layout):
    """Reads every tensor back by name, whole and in pieces, without the saver."""
    ck = mpickpt.open(path)
    check(ck.meta["world_size"] == size and ck.meta["step"] == 7, f"meta {ck.meta}")
    check(ck.meta["layout"] == layout, f"layout {ck.meta['layout']} != {layout}")
    names = set(ck)
    for name, want in expect.items():
        if "#" in name:  # per-rank: rank 0's under the name, rank r's as parallel_component_r
            base, r = name.split("#")
            name = base if r == "0" else f"{base}/parallel_component_{r}"
        check(name in names, f"open(): no '{name}' (has {sorted(names)[:8]}...)")
        a = ck[name]
        wn = to_numpy(want)
        dt_name = str(want.dtype).replace("torch.", "")
        check(a.dtype_name == dt_name, f"{name}: dtype_name {a.dtype_name}, expected {dt_name}")
        check(a.shape == tuple(want.shape), f"{name}: shape {a.shape}")
        check_bits(a.read(), wn, f"open {name} read()")
        check_bits(np.asarray(a), wn, f"open {name} np.asarray")
        check_bits(a[...], wn, f"open {name}[...]")
        if MODE == "torch":
            check_bits(a.to_torch(), want, f"open {name}.to_torch()")
        if wn.ndim == 0:
            check_bits(a[()], wn, f"open {name}[()]")
            continue
        n0 = wn.shape[0]
        for lo, hi in ((0, n0), (1, n0 - 1), (n0 // 2, n0), (0, 1), (2, 1)):
            check_bits(a[lo:hi], wn[lo:hi], f"open {name}[{lo}:{hi}]")
        if n0:
            check_bits(a[n0 - 1], wn[n0 - 1], f"open {name}[{n0 - 1}]")
            check_bits(a[-1], wn[-1], f"open {name}[-1]")
            check_bits(a[::2], wn[::2], f"open {name}[::2]")
        if wn.shape[-1]:
            j = wn.shape[-1] - 1
            check_bits(a[..., j], wn[..., j], f"open {name}[..., {j}]")
            if wn.ndim >= 2:
                check_bits(a[0, ..., j], wn[0, ..., j], f"open {name}[0, ..., {j}]")
    ck.verify()
    ck.close()


def check_layout_files(path, layout):
    """Rank 0: small tensors are packed into /packs/rank-N in the per-rank and per-node layouts
    (per-node: a file per node of MPICKPT_RANKS_PER_NODE ranks, or one), never in the shared one;
    the big one has a dataset of its own."""
    files = sorted(glob.glob(path + ".data-*"))
    k = int(os.environ.get("MPICKPT_RANKS_PER_NODE") or 0)
    want = {"per-rank": size, "shared": 1, "per-node": (size + k - 1) // k if k else 1}[layout]
    check(len(files) == want, f"data files {files}, want {want}")
    sets = [d for f in files for d in pc.datasets(f)]
    packs = [d for d in sets if d.startswith("/packs/rank-")]
    if layout != "shared":
        check(len(packs) == size, f"packs {packs}, want one per rank")
        check(packs, f"no /packs/rank-N in {files}: {sets}")
    else:
        check(not packs, f"packs in the shared layout: {packs}")
    check(any("big%2Fa" in d or d.endswith("big/a") for d in sets if d.startswith("/tensors/")),
          f"big/a has no dataset of its own: {sets}")


def run(layout):
    state, expect, bases = build()
    before = {n: (a, a.data_ptr() if MODE == "torch" else a.ctypes.data)
              for n, a in arrays_of(state)}
    base_copy = {dt: (b.clone() if MODE == "torch" else b.copy()) for dt, b in bases.items()}
    d = pc.outdir(layout)
    with mpickpt.CheckpointManager(d, layout=layout) as mgr:
        path = mgr.save(7, state)
        check(path == os.path.join(d, "ckpt-1"), f"save returned {path}")
        for name, a in arrays_of(state):
            clobber(a)
            if a.numel() if MODE == "torch" else a.size:
                check(pc.raw(a) != pc.raw(local_expect(name, expect)), f"{name}: not clobbered")
        info = mgr.restore(state)
        check(info["step"] == 7 and info["skipped"] == 0, f"restore info {info}")
    for name, a in arrays_of(state):
        obj, ptr = before[name]
        check(a is obj, f"{name}: restore replaced the array object")
        check((a.data_ptr() if MODE == "torch" else a.ctypes.data) == ptr, f"{name}: moved")
        check_bits(a, local_expect(name, expect), f"restored {name}")
    for dt, b in bases.items():  # the view's base: elements 3..9 restored, the others untouched
        check_bits(b, base_copy[dt], f"{dt}: the base array of a view")
    pc.comm.Barrier()
    if rank == 0:
        check_layout_files(path, layout)
    check_open(path, expect, layout)
    pc.same_everywhere(sorted(expect), "names")
    pc.say(f"{layout}: {len(expect)} tensors of {len(DTYPES)} {MODE} dtypes at {size} ranks ok")


if __name__ == "__main__":
    for layout in ("per-rank", "shared", "per-node"):
        run(layout)
    pc.comm.Barrier()
