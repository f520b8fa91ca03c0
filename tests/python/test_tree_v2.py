"""The record of plain values, version 2 (issue 30): tuples, keys, shared storage, load without
targets, open(dir), at 1, 2 and 4 ranks.

- tuple RNG states (random.getstate(), np.random.get_state()) saved, clobbered and restored in
  place: equal, and usable by random.setstate / np.random.set_state; a namedtuple comes back as
  itself; a NumPy scalar as its own type;
- a key that is neither str nor int (tuple, float, None, bool) is an InvalidArgumentError naming
  it, on every rank, at save;
- tied weights (torch tensors sharing storage, a view, a transpose) and NumPy views: stored once
  (the data file is as large as without the tie), the tie intact after a restore with targets
  (write one, see the other) and after mpickpt.load; a target without the tie gets the values
  copied in; a tie on some ranks only is stored as a tensor on every rank;
- mpickpt.load at another rank count (a comm.Split sub-communicator) and at the full size with
  shard="even": values exact on every rank; to="numpy"/"torch";
- mpickpt.open(dir) and load(dir): the newest restorable checkpoint (a dropped one skipped);
- a record of version 1 (written by hand into a checkpoint) still restores and loads; damaged
  records of version 2 (an alias, the tree) are CorruptError, version 3 a VersionError.

Usage: mpirun -np N python3 test_tree_v2.py OUTDIR"""
import collections
import json
import os
import random

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, comm, expect_error, rank, size

torch = pc.need_torch()

import mpickpt
from mpickpt import InvalidArgumentError

Pair = collections.namedtuple("Pair", "a b")


def data_bytes(prefix):
    """Bytes of a checkpoint's data files (without the index)."""
    d, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.startswith(base + ".data"))


# ---- tuples, keys, NumPy scalars ---------------------------------------------------------------

def tuples():
    d = pc.outdir("tuples")
    random.seed(1000 + rank)
    np.random.seed(2000 + rank)
    state = {"rng": mpickpt.PerRank({"py": random.getstate(), "np": np.random.get_state()}),
             "shared": {"t": (1, (2.5, "x"), [3, None]), "p": Pair(1, np.arange(3))},
             "f32": np.float32(0.1), "i16": np.int16(-7), "b": np.bool_(True)}
    want_py = [random.random() for _ in range(3)]
    want_np = np.random.rand(3)
    arr = state["shared"]["p"].b
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.save(1, state)
        random.seed(5)
        np.random.seed(5)
        state["rng"].value = {"py": random.getstate(), "np": np.random.get_state()}
        state["shared"]["t"] = (0, (0.0, ""), [0, 1])
        state["shared"]["p"] = Pair(0, arr)
        arr[:] = 0
        state["f32"], state["i16"], state["b"] = np.float32(0), np.int16(0), np.bool_(False)
        mgr.restore(state)
    random.setstate(state["rng"].value["py"])
    np.random.set_state(state["rng"].value["np"])
    check([random.random() for _ in range(3)] == want_py, "random after restore")
    check_bits(np.random.rand(3), want_np, "np.random after restore")
    check(state["shared"]["t"] == (1, (2.5, "x"), [3, None]) and
          type(state["shared"]["t"][1]) is tuple, f"tuple {state['shared']['t']}")
    p = state["shared"]["p"]
    check(type(p) is Pair and p.a == 1 and p.b is arr, f"namedtuple {p}")
    check_bits(arr, np.arange(3), "array in a namedtuple, in place")
    check(type(state["f32"]) is np.float32 and state["f32"] == np.float32(0.1), "np.float32")
    check(type(state["i16"]) is np.int16 and state["i16"] == -7, "np.int16")
    check(type(state["b"]) is np.bool_ and state["b"], "np.bool_")

    # load: tuples are tuples, namedtuples plain tuples, NumPy scalars Python values
    got = mpickpt.load(d)
    rng = got["rng"].value
    check(type(rng["py"]) is tuple and type(rng["np"]) is tuple, "load: tuples")
    random.setstate(rng["py"])
    np.random.set_state(rng["np"])
    check([random.random() for _ in range(3)] == want_py, "random after load")
    check_bits(np.random.rand(3), want_np, "np.random after load")
    check(got["shared"]["p"][0] == 1 and type(got["shared"]["p"]) is tuple, "load: namedtuple")
    check(type(got["f32"]) is float and got["f32"] == float(np.float32(0.1)), "load: f32")

    # keys other than str and int: refused at save, naming the key, on every rank
    for bad, shown in ((("a", 1), "('a', 1)"), (1.5, "1.5"), (None, "None"), (True, "True")):
        with mpickpt.CheckpointManager(pc.outdir("badkey")) as mgr:
            expect_error(InvalidArgumentError,
                         lambda: mgr.save(1, {"x": {"ok": 1, bad: np.zeros(2)}}),
                         f"the key {shown}", "str or int")
    # a key that is bad on one rank only: the same error everywhere
    with mpickpt.CheckpointManager(pc.outdir("badkey1")) as mgr:
        expect_error(InvalidArgumentError,
                     lambda: mgr.save(1, {"x": {(1, 2) if rank == size - 1 else "y": 1}}),
                     "the key (1, 2)", f"rank {size - 1}")
    pc.say("tuples, keys, NumPy scalars ok")


# ---- shared storage ----------------------------------------------------------------------------

def tied_model(seed, tie):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(64, 32, generator=g)
    head = emb if tie else emb.clone()
    return {"model": {"embed.weight": emb, "mid": torch.randn(32, generator=g),
                      "lm_head.weight": head},
            "np": {"base": np.arange(40, dtype=np.float32)}}


def shared_storage():
    d = pc.outdir("tied")
    st = tied_model(1, True)
    st["np"]["view"] = st["np"]["base"][4:20]            # contained: an alias with an offset
    st["np"]["strided"] = st["np"]["base"][::3]          # not contiguous: an alias
    st["model"]["emb_t"] = st["model"]["embed.weight"].t()  # a transpose of a tied tensor
    untied = tied_model(1, False)
    with mpickpt.CheckpointManager(d) as mgr:
        tied_path = mgr.save(1, st)
    with mpickpt.CheckpointManager(pc.outdir("untied")) as mgr:
        untied_path = mgr.save(1, untied)
    comm.Barrier()
    tb, ub = data_bytes(tied_path), data_bytes(untied_path)
    emb_bytes = 64 * 32 * 4
    # the untied one has a second copy of the embedding; the tied one only its JSON record more
    check(ub - tb > emb_bytes - 4096, f"data bytes tied {tb}, untied {ub}: the tie stored twice")
    ck = mpickpt.open(tied_path)
    names = set(ck)
    check(names == {"model/embed.weight", "model/mid", "np/base"}, f"tensors {sorted(names)}")
    al = ck.aliases
    check(al["model/lm_head.weight"] == {"of": "model/embed.weight", "offset": 0,
                                         "shape": [64, 32], "strides": [32, 1],
                                         "dtype": "float32", "torch": True}, f"tie {al}")
    check(al["np/view"]["of"] == "np/base" and al["np/view"]["offset"] == 16 and
          al["np/strided"]["strides"] == [3] and al["model/emb_t"]["strides"] == [1, 32],
          f"aliases {al}")
    ck.close()

    # restore with targets: the tie (sharing in the target) intact
    fresh = tied_model(2, True)
    fresh["np"]["view"] = fresh["np"]["base"][4:20]
    fresh["np"]["strided"] = fresh["np"]["base"][::3]
    fresh["model"]["emb_t"] = fresh["model"]["embed.weight"].t()
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.restore(fresh)
    m = fresh["model"]
    check_bits(m["embed.weight"], st["model"]["embed.weight"], "restored embed")
    check(m["lm_head.weight"].data_ptr() == m["embed.weight"].data_ptr(), "tie lost")
    m["embed.weight"][0, 0] = 123.0
    check(m["lm_head.weight"][0, 0] == 123.0 and m["emb_t"][0, 0] == 123.0, "tie: write one")
    check_bits(fresh["np"]["view"], np.arange(4, 20, dtype=np.float32), "np view")
    fresh["np"]["base"][5] = -1
    check(fresh["np"]["view"][1] == -1, "np view shares")

    # a target without the tie gets the values copied in
    apart = tied_model(3, False)
    apart["np"]["view"] = np.zeros(16, np.float32)
    apart["np"]["strided"] = np.zeros(14, np.float32)
    apart["model"]["emb_t"] = torch.zeros(32, 64)
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.restore(apart)
    check_bits(apart["model"]["lm_head.weight"], st["model"]["embed.weight"], "copied head")
    check(apart["model"]["lm_head.weight"].data_ptr() != apart["model"]["embed.weight"].data_ptr(),
          "apart")
    check_bits(apart["model"]["emb_t"], st["model"]["embed.weight"].t().contiguous(), "emb_t")
    check_bits(apart["np"]["strided"], np.arange(0, 40, 3, dtype=np.float32), "strided copy")

    # a checkpoint stored apart restored into a tied state: the alias is read as a tensor
    tied_target = tied_model(4, True)
    with mpickpt.CheckpointManager(pc.outdir("untied")) as mgr:
        mgr.restore(tied_target)
    check_bits(tied_target["model"]["embed.weight"], untied["model"]["embed.weight"], "apart->tie")

    # a tie on some ranks only: stored as a tensor on every rank (the same names everywhere)
    odd = tied_model(6, rank != size - 1)
    with mpickpt.CheckpointManager(pc.outdir("oddtie")) as mgr:
        path = mgr.save(1, odd)
        with mpickpt.open(path) as ck2:
            check(size == 1 or (ck2.aliases == {} and "model/lm_head.weight" in ck2),
                  f"a tie of some ranks: {ck2.aliases}")
        want = odd["model"]["embed.weight"].clone()
        with torch.no_grad():
            odd["model"]["embed.weight"].zero_()
            odd["model"]["lm_head.weight"].zero_()
        mgr.restore(odd)
    check_bits(odd["model"]["lm_head.weight"], want, "a tie of some ranks restored")

    # a TrainingState looks the backup's aliases up first, as the manager does
    ts_state = tied_model(5, True)
    with mpickpt.TrainingState(pc.outdir("training"), ts_state) as ts:
        ts.back_up(0)
        with torch.no_grad():
            ts_state["model"]["embed.weight"].zero_()
        ts.restore()
    check_bits(ts_state["model"]["lm_head.weight"], tied_model(5, True)["model"]["embed.weight"],
               "training: tie restored")
    # untied in the state, an alias in the backup: both tensors get the tied values (strict)
    ts_apart = tied_model(7, False)
    with mpickpt.TrainingState(pc.outdir("training"), ts_apart) as ts:
        ts.restore()
    for k in ("embed.weight", "lm_head.weight"):
        check_bits(ts_apart["model"][k], tied_model(5, True)["model"]["embed.weight"],
                   f"training: tie -> apart, {k}")
    # backed up apart, tied in the state: the tie's tensor read, strict and not
    with mpickpt.TrainingState(pc.outdir("training_apart"), tied_model(8, False)) as ts:
        ts.back_up(0)
    for strict in (True, False):
        ts_tied = tied_model(9, True)
        with mpickpt.TrainingState(pc.outdir("training_apart"), ts_tied) as ts:
            ts.restore(strict=strict)
        check_bits(ts_tied["model"]["embed.weight"], tied_model(8, False)["model"]["embed.weight"],
                   f"training: apart -> tie (strict={strict})")

    # load: the tie rebuilt as a view
    got = mpickpt.load(d)
    gm = got["model"]
    check_bits(gm["lm_head.weight"], st["model"]["embed.weight"], "load head")
    check(gm["lm_head.weight"].data_ptr() == gm["embed.weight"].data_ptr(), "load: tie")
    check_bits(gm["emb_t"], st["model"]["embed.weight"].t(), "load emb_t")
    gm["embed.weight"][1, 2] = 7.0
    check(gm["lm_head.weight"][1, 2] == 7.0 and gm["emb_t"][2, 1] == 7.0, "load: write one")
    check(np.shares_memory(got["np"]["view"], got["np"]["base"]) and
          np.shares_memory(got["np"]["strided"], got["np"]["base"]), "load: numpy views")
    check_bits(got["np"]["strided"], np.arange(0, 40, 3, dtype=np.float32), "load strided")
    pc.say("shared storage ok")


# ---- load at other rank counts -------------------------------------------------------------------

N = 37  # rows of the sharded array: not a multiple of any rank count


def global_rows():
    return np.arange(N * 5, dtype=np.float64).reshape(N, 5) * 0.25


def load_reshard():
    d = pc.outdir("reshard")
    lo, hi = rank * N // size, (rank + 1) * N // size
    g = global_rows()
    state = {"w": mpickpt.Shard(g[lo:hi].copy(), (N, 5), (lo, 0)),
             "t": torch.arange(6, dtype=torch.bfloat16), "step": 11,
             "pr": mpickpt.PerRank({"r": np.full(rank + 1, rank, np.int32), "v": f"r{rank}"})}
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.save(11, state)

    # the full comm, shard="even": this rank's block as a Shard, savable as it was
    got = mpickpt.load(d, shard="even")
    w = got["w"]
    check(isinstance(w, mpickpt.Shard) and w.global_shape == (N, 5), f"{w}")
    check_bits(w.local, g[w.offsets[0]:w.offsets[0] + w.local.shape[0]], "even block")
    check(w.local.shape[0] == hi - lo, "even rows")
    check(got["t"].dtype == torch.bfloat16 and torch.equal(got["t"], state["t"]), "bf16")
    check(got["pr"].value["v"] == f"r{rank}", "per-rank value")
    check_bits(got["pr"].value["r"], np.full(rank + 1, rank, np.int32), "per-rank array")
    with mpickpt.CheckpointManager(pc.outdir("resaved")) as mgr:
        mgr.save(1, got)  # the loaded tree saves back
    again = mpickpt.load(pc.outdir("resaved"))
    check_bits(again["w"], g, "resaved whole")

    # a sub-communicator of another size (ranks 0..k-1, k = size - 1 or 1): whole arrays,
    # to="numpy"; per-rank values of its ranks
    k = max(1, size - 1)
    sub = comm.Split(0 if rank < k else 1, rank)
    got = mpickpt.load(d, sub, to="numpy", skip_missing_per_rank=True)
    check_bits(got["w"], g, "whole on a sub-communicator")
    check(got["t"].dtype == np.uint16, "bf16 as bits with to='numpy'")
    check(got["step"] == 11, "step")
    check_bits(got["pr"].value["r"], np.full(sub.rank + 1, sub.rank, np.int32), "sub per-rank")
    sub.Free()

    # a callable spec, torch
    def rows2(name, shape, r, n):
        return (2 * r, 0), (min(2, shape[0] - 2 * r) if 2 * r < shape[0] else 0, shape[1])

    got = mpickpt.load(d, shard=rows2, to="torch")
    w = got["w"]
    check(torch.is_tensor(w.local), "to=torch")
    check_bits(w.local.numpy(), g[2 * rank:2 * rank + w.local.shape[0]], "callable block")

    # more ranks than wrote: PerRank needs skip_missing_per_rank
    if size > 1:
        half = comm.Split(0 if rank < size // 2 else 1, rank)
        if rank < size // 2:
            with mpickpt.CheckpointManager(pc.outdir(f"half{size}"), comm=half) as mgr:
                mgr.save(1, {"pr": mpickpt.PerRank(np.full(3, half.rank, np.int64))})
        half.Free()
        comm.Barrier()
        expect_error(mpickpt.NotFoundError, lambda: mpickpt.load(pc.outdir(f"half{size}")),
                     "skip_missing_per_rank")
        got = mpickpt.load(pc.outdir(f"half{size}"), skip_missing_per_rank=True)
        if rank < size // 2:
            check_bits(got["pr"].value, np.full(3, rank, np.int64), "half per-rank")
        else:
            check(got["pr"].value is None, "missing rank: PerRank(None)")
    pc.say("load ok")


# ---- open(dir), and a record of version 1 -------------------------------------------------------

def open_dir_and_v1():
    d = pc.outdir("newest")
    state = {"x": np.zeros(4), "step": 0}
    with mpickpt.CheckpointManager(d) as mgr:
        for step in (1, 2, 3):
            state["x"][:] = step
            state["step"] = step
            last = mgr.save(step, state)
        # open(dir) while the manager holds the directory's lock: read-only, no lock
        ck = mpickpt.open(d)
        check(ck.prefix == last and ck.meta["step"] == 3, f"open(dir) {ck.prefix}")
        ck.close()
        check(mpickpt.load(d)["step"] == 3, "load(dir) while locked")
    pc.run_cli("drop", d, "ckpt-3")
    ck = mpickpt.open(d)
    check(ck.meta["step"] == 2, f"a dropped checkpoint is skipped: {ck.prefix}")
    ck.close()
    got = mpickpt.load(d)
    check(got["step"] == 2 and np.all(got["x"] == 2), "load(dir) after the drop")
    pc.run_cli("pin", d, "ckpt-1")
    check(mpickpt.newest(d).endswith("ckpt-1"), "a pin is honoured")
    check(mpickpt.load(d)["step"] == 1, "load(dir) of the pinned checkpoint")
    pc.run_cli("pin", "--clear", d)
    check(mpickpt.newest(d).endswith("ckpt-2"), "the pin cleared")
    # newest() is the restore's rule (C decides): the pinned checkpoint damaged is the pin's
    # error, as the manager's restore says, never the older ckpt-1 behind the pin
    pc.run_cli("pin", d, "ckpt-2")
    comm.Barrier()
    if rank == 0:
        for f in os.listdir(d):
            if f.startswith("ckpt-2.data-"):
                os.unlink(os.path.join(d, f))
    comm.Barrier()
    expect_error(mpickpt.NotFoundError, lambda: mpickpt.newest(d), "ckpt-2 is pinned")
    with mpickpt.CheckpointManager(d) as mgr:
        expect_error(mpickpt.NotFoundError, lambda: mgr.restore({"x": np.zeros(4), "step": 0}),
                     "ckpt-2 is pinned")
    pc.run_cli("pin", "--clear", d)
    check(mpickpt.newest(d).endswith("ckpt-1"), "the damaged ckpt-2 skipped once unpinned")

    # a record of version 1, by hand: the Saver writes it as the package did before issue 30
    v1 = pc.outdir("v1")
    from mpickpt import _mpickpt as C
    dup = comm.Dup()
    s = C.Saver(dup)
    a = np.arange(6, dtype=np.float32)
    s.add_replicated("m/a%2Fb", a, C.FLOAT32, (6,), False)
    t12 = torch.arange(8, dtype=torch.float32) + 0.5  # tied in the state, two tensors in v1
    s.add_replicated("m/t1", t12.numpy(), C.FLOAT32, (8,), False)
    s.add_replicated("m/t2", t12.numpy(), C.FLOAT32, (8,), False)
    s.add_blob("__mpickpt__/json")
    rec = {"mpickpt_json": 1, "replicated": {"m/step": 4, "m/t/0": "x", "m/t/1": 2},
           "per_rank": {"r": rank}}
    s.set_blob("__mpickpt__/json", json.dumps(rec).encode())
    if rank == 0:
        os.makedirs(v1, exist_ok=True)
    comm.Barrier()
    s.write(os.path.join(v1, "old"), step=4)
    s.close()
    dup.Free()
    prefix = os.path.join(v1, "old")
    target = {"m": {"a/b": np.zeros(6, np.float32), "step": 0, "t": ("x", 0)},
              "r": mpickpt.PerRank(-1)}
    dup = comm.Dup()
    s = C.Saver(dup)
    reg = mpickpt._state.Registered()
    mpickpt._state.restore_state(dup, reg, s, target, None,
                                 lambda e, c, l: s.restore(prefix, strict=False))
    mpickpt._state.restore_finish(dup, reg, s, False, prefix)
    s.close()
    dup.Free()
    tied_w = torch.zeros(8)
    tied = {"m": {"t1": tied_w, "t2": tied_w}}
    dup = comm.Dup()
    s = C.Saver(dup)
    reg = mpickpt._state.Registered()
    # no prefix: aliases not looked up first
    mpickpt._state.restore_state(dup, reg, s, tied, None,
                                 lambda e, c, l: s.restore(prefix, strict=False))
    mpickpt._state.restore_finish(dup, reg, s, False, prefix, strict=False)
    s.close()
    dup.Free()
    # a checkpoint without a record (a C program's): a tie of the state read apart, the
    # aliases looked up first (CheckpointManager's way)
    craw = os.path.join(v1, "crec")
    dup = comm.Dup()
    s = C.Saver(dup)
    s.add_replicated("t1", t12.numpy(), C.FLOAT32, (8,), False)
    s.add_replicated("t2", (t12 * 2).numpy(), C.FLOAT32, (8,), False)
    s.write(craw)
    s.close()
    c_w = torch.zeros(8)
    c_state = {"t1": c_w, "t2": c_w.view(2, 4).view(8)}
    s = C.Saver(dup)
    reg = mpickpt._state.Registered()
    mpickpt._state.restore_state(dup, reg, s, c_state, craw,
                                 lambda e, c, l: s.restore(craw, strict=False))
    mpickpt._state.restore_finish(dup, reg, s, False, craw, strict=False)
    s.close()
    dup.Free()
    check_bits(c_w, t12 * 2, "no record: the alias read apart, written after its target")
    check_bits(target["m"]["a/b"], a, "v1 array")
    check(target["m"]["step"] == 4 and target["m"]["t"] == ("x", 2) and target["r"].value == rank,
          f"v1 values {target}")
    # a C program's checkpoint: a full tensor (rank 0 owns it whole), a replicated one and a
    # registered saver's bytes (a blob, not loaded): load gives the arrays
    cprog = os.path.join(v1, "cprog")
    dup = comm.Dup()
    s = C.Saver(dup)
    full = np.arange(5, dtype=np.int64) * 3
    if rank == 0:
        s.add_full("prog/full", full, C.INT64, (5,))
    s.add_replicated("prog/rep", a, C.FLOAT32, (6,), False)
    s.add_blob("prog/opaque")
    s.set_blob("prog/opaque", b"not json")
    s.write(cprog)
    s.close()
    dup.Free()
    got = mpickpt.load(cprog)
    check(sorted(got) == ["prog"] and sorted(got["prog"]) == ["full", "rep"], f"C program {got}")
    check_bits(got["prog"]["full"], full, "a C program's full tensor loaded")
    check_bits(got["prog"]["rep"], a, "a C program's replicated tensor loaded")
    got = mpickpt.load(prefix)
    check_bits(tied["m"]["t1"], t12, "v1 tie (t1)")
    check_bits(tied["m"]["t2"], t12, "v1 tie (t2: read apart)")
    check(tied["m"]["t2"].data_ptr() == tied["m"]["t1"].data_ptr(), "v1: the state's tie kept")
    check_bits(got["m"]["a/b"], a, "v1 load array")
    check(got["m"]["step"] == 4 and got["m"]["t"] == {"0": "x", "1": 2}, f"v1 load {got}")
    check(isinstance(got["r"], mpickpt.PerRank) and got["r"].value == rank, "v1 per-rank")

    # damaged records of version 2, and a future version: the same error on every rank
    for name, rec, cls, needle in (
            ("badalias", {"mpickpt_json": 2, "replicated": {}, "per_rank": {},
                          "tree": ["d", []], "aliases": {"x": {"of": 1}}},
             mpickpt.CorruptError, "the alias 'x'"),
            ("notree", {"mpickpt_json": 2, "replicated": {}, "per_rank": {}},
             mpickpt.CorruptError, "tree"),
            ("badtree", {"mpickpt_json": 2, "replicated": {}, "per_rank": {},
                         "tree": ["d", [["k", ["?"]]]], "aliases": {}},
             mpickpt.CorruptError, "tree"),
            ("future", {"mpickpt_json": 3, "replicated": {}, "per_rank": {}, "tree": ["d", []]},
             mpickpt.VersionError, "version 3")):
        dup = comm.Dup()
        s = C.Saver(dup)
        s.add_blob("__mpickpt__/json")
        s.set_blob("__mpickpt__/json", json.dumps(rec).encode())
        s.write(os.path.join(v1, name))
        s.close()
        dup.Free()
        expect_error(cls, lambda: mpickpt.load(os.path.join(v1, name)), needle)
    pc.say("open(dir), v1 ok")


tuples()
shared_storage()
load_reshard()
open_dir_and_v1()
pc.say("OK")
