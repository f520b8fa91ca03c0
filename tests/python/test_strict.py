"""Strict restores and the replica check of the Python package (issue 30), at any rank count.

Strict restores: a checkpoint of {w, opt: {a, b: 3}, lr: 0.1, pr: PerRank(rank)}; a state with
an extra tensor and without 'opt/a' is a MismatchError on every rank naming both (tensors, from C,
before anything is read: w keeps its value); a state whose tensors match but whose plain values do
not ('lr2' instead of 'lr') is a MismatchError naming 'lr2' and 'lr', nothing put back; with
strict=False what matches is restored and info lists 'missing' and 'unexpected' (tensors and plain
values); a matching state gives empty lists. The same through restore_or_initialize, restore(step=)
and TrainingState.restore.

The replica check: a replicated array that differs by rank is a MismatchError at the save naming it
and the ranks whose copy differs (at 1 rank: saved); replica_mismatch='warn' saves (the writer's
copy comes back); check_replicas='every' catches a later divergence, 'first' does not; 'off' never
checks; equal copies pass."""
import os
import sys

import numpy as np

import pycheck as pc
from pycheck import check, expect_error, rank, size

import mpickpt

OUT = pc.outdir()


def saved_state():
    return {"w": np.arange(4.0), "opt": {"a": np.ones(3), "b": 3}, "lr": 0.1,
            "pr": mpickpt.PerRank(rank)}


d = os.path.join(OUT, "strict")
with mpickpt.CheckpointManager(d) as mgr:
    mgr.save(1, saved_state())

pc.say("strict: tensors")
with mpickpt.CheckpointManager(d) as mgr:
    st = {"w": np.zeros(4), "extra": np.zeros(2), "opt": {"b": 0}, "lr": 0.0,
          "pr": mpickpt.PerRank(-1)}
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 missing", "'extra'",
                 "1 unexpected", "'opt/a'")
    check(st["w"][1] == 0.0, "strict: w was read before the error")
    expect_error(mpickpt.MismatchError, lambda: mgr.restore_or_initialize(st), "'extra'")
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st, step=1), "'opt/a'")
    info = mgr.restore(st, strict=False)
    check(info["missing"] == ["extra"] and info["unexpected"] == ["opt/a"],
          f"not strict: {info['missing']} {info['unexpected']}")
    check(st["w"][1] == 1.0 and st["extra"][0] == 0.0 and st["opt"]["b"] == 3 and
          st["lr"] == 0.1 and st["pr"].value == rank, f"not strict: {st}")

pc.say("strict: plain values")
with mpickpt.CheckpointManager(d) as mgr:
    st = {"w": np.zeros(4), "opt": {"a": np.zeros(3), "b": 0}, "lr2": 0.5,
          "pr": mpickpt.PerRank(-1)}
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 missing", "'lr2'",
                 "1 unexpected", "'lr'")
    check(st["opt"]["b"] == 0 and st["lr2"] == 0.5 and st["pr"].value == -1,
          f"strict: a plain value was put back: {st}")
    info = mgr.restore_or_initialize(st, strict=False)
    check(info["missing"] == ["lr2"] and info["unexpected"] == ["lr"],
          f"not strict: {info['missing']} {info['unexpected']}")
    check(st["opt"]["b"] == 3 and st["lr2"] == 0.5 and st["pr"].value == rank, f"{st}")
    # both kinds, not strict: every name in the lists
    st = {"w": np.zeros(4), "x": np.zeros(1), "opt": {"b": 0}}
    info = mgr.restore(st, step=1, strict=False)
    check(info["missing"] == ["x"] and info["unexpected"] == ["lr", "opt/a", "pr"],
          f"both kinds: {info['missing']} {info['unexpected']}")
    # a matching state
    st = saved_state()
    info = mgr.restore(st)
    check(info["missing"] == [] and info["unexpected"] == [], f"matching: {info}")

pc.say("strict: a state with aliases (tied arrays: the names compared in Python)")
ad = os.path.join(OUT, "alias")
base = np.arange(6.0)
with mpickpt.CheckpointManager(ad) as mgr:
    mgr.save(1, {"w": base, "tied": base, "x": np.ones(2)})
with mpickpt.CheckpointManager(ad) as mgr:
    b2 = np.zeros(6)
    st = {"w": b2, "tied": b2, "x": np.zeros(2), "extra": np.zeros(1)}
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 missing", "'extra'")
    info = mgr.restore(st, strict=False)
    check(info["missing"] == ["extra"] and info["unexpected"] == [] and b2[5] == 5.0,
          f"aliases, not strict: {info['missing']} {info['unexpected']} {b2}")
    b3 = np.zeros(6)
    st = {"w": b3, "tied": b3, "x": np.zeros(2)}
    info = mgr.restore(st)
    check(info["missing"] == [] and info["unexpected"] == [] and b3[5] == 5.0 and
          st["x"][1] == 1.0, f"aliases, matching: {info} {st}")
    st = {"w": np.zeros(6), "tied": np.zeros(6), "x": np.zeros(2)}  # untied now
    mgr.restore(st)
    check(st["tied"][5] == 5.0 and st["w"][5] == 5.0, f"an untied state: {st}")
    b4 = np.zeros(6)
    st = {"w": b4, "tied": b4}  # 'x' of the checkpoint is not in the state
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 unexpected", "'x'")
    # the checkpoint's alias 'tied' (stored once, as 'w') is not in the state: unexpected
    st = {"w": np.zeros(6), "x": np.zeros(2)}
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 unexpected", "'tied'")
    info = mgr.restore(st, strict=False)
    check(info["unexpected"] == ["tied"] and info["missing"] == [] and st["w"][5] == 5.0,
          f"an alias the state lacks: {info}")

# saved untied, restored into a state where 'wt' is a view of 'w' (a transpose: not contiguous,
# so an alias read apart, not registered: C would call it unexpected); strict, and right
ud = os.path.join(OUT, "untied")
w0 = np.arange(6.0).reshape(2, 3)
with mpickpt.CheckpointManager(ud) as mgr:
    mgr.save(1, {"w": w0, "wt": np.ascontiguousarray(w0.T), "x": np.ones(2)})
with mpickpt.CheckpointManager(ud) as mgr:
    b5 = np.zeros((2, 3))
    st = {"w": b5, "wt": b5.T, "x": np.zeros(2)}
    info = mgr.restore(st)
    check(info["missing"] == [] and info["unexpected"] == [] and b5[1, 2] == 5.0 and
          st["wt"][2, 1] == 5.0 and st["x"][0] == 1.0, f"untied into a view: {info} {st}")
    st = {"w": b5, "wt": b5.T}
    expect_error(mpickpt.MismatchError, lambda: mgr.restore(st), "1 unexpected", "'x'")

pc.say("strict: TrainingState")
td = os.path.join(OUT, "training")
with mpickpt.TrainingState(td, {"w": np.arange(3.0), "e": 1}) as ts:
    ts.back_up(0)
st = {"w": np.zeros(3), "f": 2}
with mpickpt.TrainingState(td, st) as ts:
    expect_error(mpickpt.MismatchError, lambda: ts.restore(), "'f'", "'e'")
    info = ts.restore(strict=False)
    check(info["missing"] == ["f"] and info["unexpected"] == ["e"] and st["w"][2] == 2.0,
          f"training not strict: {info}")

pc.say("replica check")


STATE = {"bn": np.zeros(4), "w": np.ones(2)}


def state(differ):
    """The same arrays every time (the same plan), bn set in place."""
    STATE["bn"][:] = np.arange(4.0) + (rank % 2 if differ else 0)
    return STATE


rd = os.path.join(OUT, "replicas")
with mpickpt.CheckpointManager(rd) as mgr:
    if size > 1:
        err = expect_error(mpickpt.MismatchError, lambda: mgr.save(1, state(True)), "'bn'",
                           "differ")
        check("'w'" not in str(err), f"names w: {err}")
        odd = [r for r in range(size) if r % 2 == 1]
        others = [r for r in range(size) if r % 2 == 0]
        # the ranks named are those whose copy differs from the writer's (either parity)
        check(any(", ".join(map(str, g)) + " differ" in str(err) for g in (odd, others)),
              f"ranks not named: {err}")
        check(mgr.all_steps() == [], "a checkpoint was committed")
    else:
        mgr.save(1, state(True))
    mgr.save(2, state(False))  # equal copies pass
    mgr.save(3, state(True))   # first: not checked again (the same plan)

with mpickpt.CheckpointManager(os.path.join(OUT, "every"), check_replicas="every") as mgr:
    mgr.save(1, state(False))
    if size > 1:
        expect_error(mpickpt.MismatchError, lambda: mgr.save(2, state(True)), "'bn'")
    else:
        mgr.save(2, state(True))

# the same check in async mode (before the save returns) and in the shared layout
for kw in ({"async_save": True}, {"layout": "shared"}):
    with mpickpt.CheckpointManager(os.path.join(OUT, "kw" + "".join(kw)), **kw) as mgr:
        st = {"bn": np.arange(4.0) + rank % 2, "w": np.ones(2)}
        if size > 1:
            expect_error(mpickpt.MismatchError, lambda: mgr.save(1, st), "'bn'")
        else:
            mgr.save(1, st)
        st["bn"][:] = np.arange(4.0)
        mgr.save(2, st)
        mgr.wait_until_finished()
        check(mgr.latest_step() == 2, f"{kw}: steps {mgr.all_steps()}")

with mpickpt.CheckpointManager(os.path.join(OUT, "off"), check_replicas="off") as mgr:
    mgr.save(1, state(True))

wd = os.path.join(OUT, "warn")
with mpickpt.CheckpointManager(wd, replica_mismatch="warn") as mgr:
    mgr.save(1, state(True))
with mpickpt.CheckpointManager(wd) as mgr:
    st = {"bn": np.zeros(4), "w": np.zeros(2)}
    mgr.restore(st)
    got = pc.same_everywhere(float(st["bn"][1]), "warn: the restored copy")
    check(got in (1.0, 2.0), f"warn: restored {got}")

expect_error(mpickpt.InvalidArgumentError,
             lambda: mpickpt.CheckpointManager(os.path.join(OUT, "bad"), check_replicas="sometimes"),
             "check_replicas")

pc.say(f"test_strict: {size} ranks, passed")
