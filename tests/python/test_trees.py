"""State trees and JSON leaves, and the errors of bad states, the same on every rank.

- a real torch.nn model's state_dict() (BatchNorm's int64 0-d num_batches_tracked included) and
  torch.optim.Adam's state_dict() after a step (its float32 0-d `step`, exp_avg, exp_avg_sq and
  param_groups) restored into a fresh model and optimizer: the next training step gives the same
  bits as the original's;
- JSON leaves (None, bools, ints up to 2**70, floats with NaN, +-inf, -0.0, the smallest
  subnormal, unicode and control characters) restored by value into dicts, lists and PerRank, and
  read back with mpickpt.open().json / json_of_rank(r);
- keys with '/' and '%'; a tuple whose value changed (rebuilt by restore); two keys making one name,
  unsupported leaves, non-contiguous and read-only arrays (InvalidArgumentError naming the key); a
  missing key, a wrong dtype or shape at restore (MismatchError naming the key: restores are strict);
  a key or a bad leaf on one rank only (an error on every rank, never a hang).

Usage: mpirun -np N python3 test_trees.py OUTDIR"""
import copy
import math

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, expect_error, rank, size

torch = pc.need_torch()

import mpickpt
from mpickpt import InvalidArgumentError, MismatchError, NotFoundError


def tensors_equal(a, b, what):
    """Bit-for-bit equality of two nested state dicts' tensors and plain values."""
    if isinstance(a, dict):
        check(isinstance(b, dict) and list(a) == list(b), f"{what}: keys {list(a)} vs {list(b)}")
        for k in a:
            tensors_equal(a[k], b[k], f"{what}/{k}")
    elif isinstance(a, (list, tuple)):
        check(type(a) is type(b) and len(a) == len(b), f"{what}: {a!r} vs {b!r}")
        for i, (x, y) in enumerate(zip(a, b)):
            tensors_equal(x, y, f"{what}/{i}")
    elif isinstance(a, torch.Tensor):
        check(torch.equal(a, b) or a.isnan().any(), f"{what}: torch.equal")
        check_bits(a, b, what)
    else:
        plain_equal(a, b, what)


def plain_equal(got, want, what):
    check(type(got) is type(want), f"{what}: {got!r} ({type(got).__name__}), expected {want!r}")
    if isinstance(want, float) and math.isnan(want):
        check(math.isnan(got), f"{what}: {got!r}, expected nan")
    elif isinstance(want, float):
        check(got == want and math.copysign(1, got) == math.copysign(1, want),
              f"{what}: {got!r}, expected {want!r}")
    else:
        check(got == want, f"{what}: {got!r}, expected {want!r}")


# ---- a model and its optimizer ------------------------------------------------------------------

def make_model(seed, lr):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return model, opt


def train_step(model, opt, step):
    g = torch.Generator().manual_seed(1000 + step)  # the same batch on every rank: replicated
    x, y = torch.randn(16, 6, generator=g), torch.randn(16, 3, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def model_and_optimizer():
    d = pc.outdir("model")
    model, opt = make_model(0, 0.01)
    for s in range(3):
        train_step(model, opt, s)
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 2}
    check(state["optim"]["state"][0]["step"].dtype == torch.float32, "Adam's step is a tensor")
    want_model = copy.deepcopy(model.state_dict())
    want_optim = copy.deepcopy(opt.state_dict())
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.save(3, state)

    # a fresh job: other weights, another learning rate, one step so Adam's state exists
    model2, opt2 = make_model(1, 0.5)
    train_step(model2, opt2, 99)
    state2 = {"model": model2.state_dict(), "optim": opt2.state_dict(), "epoch": 0}
    check(not torch.equal(model2[0].weight, model[0].weight), "the fresh model differs")
    with mpickpt.CheckpointManager(d) as mgr:
        info = mgr.restore(state2)
    check(info["step"] == 3 and state2["epoch"] == 2, f"info {info}, epoch {state2['epoch']}")
    # the parameters themselves were written (state_dict() shares their memory)
    tensors_equal(model2.state_dict(), want_model, "model")
    check(model2[1].num_batches_tracked.item() == 3, "BatchNorm's counter")
    # plain values (lr) came back into the state dict; load_state_dict hands them to Adam
    check(state2["optim"]["param_groups"][0]["lr"] == 0.01, "lr restored into the state dict")
    opt2.load_state_dict(state2["optim"])
    tensors_equal(opt2.state_dict(), want_optim, "optim")
    # the next step of the restored job is the next step of the original, bit for bit
    train_step(model, opt, 3)
    train_step(model2, opt2, 3)
    tensors_equal(model2.state_dict(), model.state_dict(), "after a step")
    tensors_equal(opt2.state_dict(), opt.state_dict(), "optim after a step")
    pc.say("model and Adam state ok")


# ---- JSON leaves ---------------------------------------------------------------------------------

PLAIN = {
    "none": None, "t": True, "f": False, "zero": 0, "i": -42, "big": 2**70,
    "bigneg": -(2**64) - 1, "fl": 1.5, "one": 1.0, "nan": float("nan"), "inf": float("inf"),
    "ninf": float("-inf"), "negzero": -0.0, "tiny": 5e-324, "huge": 1.7976931348623157e308,
    "s": 'h\u00e9llo \u2713 \U0001d518 "q" \\ \n\t\x00 end', "empty": "",
    "nested": {"l": [1, "a", None, [2.5, {"k": "v"}]]}, "tup": ("x", 1),
}


def clobbered(v):
    """The same structure with other values (tuples kept: restore rebuilds them anyway)."""
    if isinstance(v, dict):
        return {k: clobbered(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clobbered(x) for x in v]
    if isinstance(v, tuple):
        return v
    return "clobbered" if not isinstance(v, str) else 12345


def per_rank_value(r):
    return {"rank": r, "name": f"rank-{r} \u00e9", "vals": [r, r * 0.5, None]}


def json_leaves():
    d = pc.outdir("json")
    state = {"j": copy.deepcopy(PLAIN), "pr": mpickpt.PerRank(per_rank_value(rank)),
             "pr_int": mpickpt.PerRank(10 * rank + 1), "arr": np.arange(3.0)}
    with mpickpt.CheckpointManager(d) as mgr:
        path = mgr.save(1, state)
        state["j"] = clobbered(state["j"])
        j = state["j"]  # restored into these very containers
        state["pr"].value = clobbered(state["pr"].value)
        state["pr_int"].value = -1
        mgr.restore(state)
    check(state["j"] is j, "the dict was replaced")
    for k, want in PLAIN.items():
        tensors_equal(state["j"][k], want, f"j/{k}")
    tensors_equal(state["pr"].value, per_rank_value(rank), "pr")
    plain_equal(state["pr_int"].value, 10 * rank + 1, "pr_int")

    ck = mpickpt.open(path)
    js = ck.json
    plain_equal(js["j/big"], 2**70, "open json j/big")
    plain_equal(js["j/s"], PLAIN["s"], "open json j/s")
    check(math.isnan(js["j/nan"]) and js["j/negzero"] == 0.0, "open json nan, -0.0")
    plain_equal(js["j/nested/l/3/1/k"], "v", "open json nested")
    plain_equal(js["j/tup/0"], "x", "open json tuple")
    check("pr/rank" not in js, f"per-rank values in .json: {sorted(js)}")
    for r in range(size):
        mine = ck.json_of_rank(r)
        plain_equal(mine["pr/rank"], r, f"json_of_rank({r})")
        plain_equal(mine["pr/name"], f"rank-{r} \u00e9", f"json_of_rank({r}) name")
        plain_equal(mine["pr_int"], 10 * r + 1, f"json_of_rank({r}) pr_int")
    check(ck.json_of_rank(size) is None, "json_of_rank of a rank the writer did not have")
    ck.close()

    # a tuple cannot be updated in place: restore rebuilds it (issue 30), a new tuple in its place
    state["j"]["tup"] = ("x", 2)
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.restore(state)
    tensors_equal(state["j"]["tup"], ("x", 1), "rebuilt tuple")
    pc.say("JSON leaves ok")


# ---- names ---------------------------------------------------------------------------------------

def awkward_keys():
    d = pc.outdir("keys")
    a, b = np.arange(4, dtype=np.int32), np.arange(5, dtype=np.int16)
    state = {"a/b": a, "a%2Fb": b, "c%": 5, "d/e": {"f/g": 1.5, 7: "seven"}}
    with mpickpt.CheckpointManager(d) as mgr:
        path = mgr.save(1, state)
        a[:] = 0
        b[:] = 0
        state["c%"] = 0
        state["d/e"]["f/g"] = 0.0
        state["d/e"][7] = ""
        mgr.restore(state)
    check_bits(a, np.arange(4, dtype=np.int32), "a/b")
    check_bits(b, np.arange(5, dtype=np.int16), "a%2Fb")
    check(state["c%"] == 5 and state["d/e"] == {"f/g": 1.5, 7: "seven"}, f"{state}")
    ck = mpickpt.open(path)
    check(set(ck) == {"a%2Fb", "a%252Fb"}, f"names {sorted(ck)}")
    check_bits(ck["a%2Fb"].read(), np.arange(4, dtype=np.int32), "open a/b")
    check(ck.json == {"c%25": 5, "d%2Fe/f%2Fg": 1.5, "d%2Fe/7": "seven"}, f"json {ck.json}")

    with mpickpt.CheckpointManager(pc.outdir("keys2")) as mgr:
        expect_error(InvalidArgumentError, lambda: mgr.save(1, {1: a, "1": b}),
                     "two keys make the name '1'")
        expect_error(InvalidArgumentError, lambda: mgr.save(1, {"x": {1: 1, "1": 2}}),
                     "'x/1'")
    pc.say("keys ok")


# ---- bad states ---------------------------------------------------------------------------------

def bad_leaves():
    d = pc.outdir("bad")
    ok = np.zeros(4, dtype=np.float32)
    m = np.arange(12, dtype=np.float64).reshape(3, 4)
    ro = np.arange(3.0)
    ro.setflags(write=False)
    t = torch.arange(12.0).reshape(3, 4)
    cases = [
        ({"s": {1, 2}}, "'s'", "set"),
        ({"deep": {"x": [1, {2}]}}, "'deep/x/1'", "set"),
        ({"b": b"bytes"}, "'b'", "bytes"),
        ({"o": object()}, "'o'", "object"),
        ({"c": 1 + 2j}, "'c'", "complex"),
        ({"nc": m[:, ::2]}, "tensor 'nc'", "not C-contiguous"),
        ({"tr": {"x": m.T}}, "tensor 'tr/x'", "not C-contiguous"),
        ({"ro": ro}, "tensor 'ro'", "read-only"),
        ({"be": np.arange(3, dtype=">f4")}, "tensor 'be'", ">f4"),
        ({"obj": np.array([None])}, "tensor 'obj'", "object"),
        ({"tt": t.t()}, "tensor 'tt'", "not contiguous"),
        ({"tc": torch.zeros(2, dtype=torch.complex64)}, "tensor 'tc'", "complex64"),
        ({"pr": mpickpt.PerRank(mpickpt.PerRank(1))}, "'pr'", "PerRank inside PerRank"),
        ({"__mpickpt__": 1}, "__mpickpt__"),
        ({"": 1}, "empty"),
    ]
    with mpickpt.CheckpointManager(d) as mgr:
        for bad, *needles in cases:
            state = {"ok": ok, **bad}
            expect_error(InvalidArgumentError, lambda: mgr.save(1, state), *needles)
            expect_error(InvalidArgumentError, lambda: mgr.restore(state), *needles)
        expect_error(InvalidArgumentError, lambda: mgr.save(1, [ok]), "a state is a dict")
        check(mgr.all_steps() == [], f"a failed save left {mgr.all_steps()}")
        # one rank alone with a bad leaf: every rank raises its error, prefixed with the rank
        if size > 1:
            state = {"ok": ok, "x": {1, 2} if rank == size - 1 else 1}
            expect_error(InvalidArgumentError, lambda: mgr.save(1, state),
                         f"rank {size - 1}: 'x'", "set")
        # after all that the manager still works
        check(mgr.save(2, {"ok": ok}).endswith("ckpt-1"), "a save after the errors")
    pc.say("bad leaves ok")


def restore_mismatch():
    d = pc.outdir("mismatch")
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    state = {"w": w, "b": np.arange(5), "n": 1, "l": [1, 2]}
    with mpickpt.CheckpointManager(d) as mgr:
        mgr.save(1, state)
        expect_error(MismatchError, lambda: mgr.restore({**state, "missing": np.zeros(2)}),
                     "'missing'")
        expect_error(MismatchError, lambda: mgr.restore({**state, "nested": {"m": np.zeros(2)}}),
                     "'nested/m'")
        expect_error(MismatchError, lambda: mgr.restore({**state, "plain": 5}), "'plain'")
        expect_error(MismatchError, lambda: mgr.restore({**state, "l": [1, 2, 3]}), "'l/2'")
        expect_error(MismatchError,
                     lambda: mgr.restore({**state, "w": np.zeros((4, 3), np.float64)}), "'w'")
        expect_error(MismatchError,
                     lambda: mgr.restore({**state, "w": np.zeros((3, 4), np.float32)}), "'w'")
        expect_error(MismatchError,
                     lambda: mgr.restore({**state, "w": torch.zeros(4, 3, dtype=torch.int32)}),
                     "'w'")
        # still usable, and a good restore gives the values back
        w[:] = -1
        mgr.restore(state)
        check_bits(w, np.arange(12, dtype=np.float32).reshape(4, 3), "w after the errors")

        if size > 1:
            last = size - 1
            # an array registered on one rank only
            extra = {"only": np.zeros(3)} if rank == 0 else {}
            expect_error(MismatchError, lambda: mgr.restore({**state, **extra}), "'only'")
            extra = {"only": np.zeros(3)} if rank == last else {}
            expect_error(MismatchError, lambda: mgr.save(2, {**state, **extra}), "only")
            # a plain value on one rank only: the save refuses it like an array (rank 0's record
            # of replicated values, which restore reads, would not have it), and restore does
            # not find it
            for r in (0, last):
                extra = {"only_plain": {"x": 3}} if rank == r else {}
                expect_error(MismatchError, lambda: mgr.save(3, {**state, **extra}),
                             "'only_plain/x'", f"rank {r}")
            check(mgr.all_steps() == [1], f"steps {mgr.all_steps()}")
            extra = {"only_plain": 3} if rank == last else {}
            expect_error(MismatchError, lambda: mgr.restore({**state, **extra}), "'only_plain'")
            # a PerRank value may differ in its keys from rank to rank
            pr = mpickpt.PerRank({"r": rank} if rank else {"r": 0, "extra": "chief"})
            mgr.save(4, {**state, "pr": pr})
            pr.value = {"r": -1} if rank else {"r": -1, "extra": ""}
            mgr.restore({**state, "pr": pr})
            check(pr.value == ({"r": rank} if rank else {"r": 0, "extra": "chief"}), f"{pr}")
    pc.say("restore mismatches ok")


if __name__ == "__main__":
    model_and_optimizer()
    json_leaves()
    awkward_keys()
    bad_leaves()
    restore_mismatch()
    pc.comm.Barrier()
