"""TrainingState (TensorFlow's BackupAndRestore): back_up(epoch) at the end of an epoch and
back_up(epoch, step) inside one, restore() into a fresh job's state in place, initial_epoch and
initial_step (the same on every rank), one backup kept under <dir>/chief, no workertemp_<rank>
left with files, delete_backup() removing the directory; and an async backup that close() waits
for.

Usage: mpirun -np N python3 test_training.py OUTDIR"""
import glob
import os

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, rank, size

import mpickpt

N = 1000


def make_state():
    return {"w": mpickpt.Shard(np.zeros(N), (N * size,), (N * rank,)), "r": np.zeros(4, np.int64),
            "note": "", "loader": mpickpt.PerRank({"pos": 0})}


def fill(state, k):
    state["w"].local[:] = np.arange(N) * k + rank
    state["r"][:] = k
    state["note"] = f"backup {k}"
    state["loader"].value["pos"] = 100 * k + rank


def expect(state, k, what):
    want = make_state()
    fill(want, k)
    check_bits(state["w"].local, want["w"].local, f"{what}: w")
    check_bits(state["r"], want["r"], f"{what}: r")
    check(state["note"] == want["note"] and state["loader"].value == want["loader"].value,
          f"{what}: {state['note']} {state['loader'].value}")


def files_in(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def starts(ts, what):
    got = pc.same_everywhere((ts.initial_epoch, ts.initial_step), f"{what}: initial epoch/step")
    return got


def main():
    d = pc.outdir("backup")
    state = make_state()
    with mpickpt.TrainingState(d, state) as ts:
        check(ts.restore() is None, "nothing to restore yet")
        check(starts(ts, "fresh") == (0, 0), f"fresh start {starts(ts, 'fresh')}")
        fill(state, 1)
        ts.back_up(2)  # the end of epoch 2
    pc.comm.Barrier()
    listing = files_in(d)
    check([f for f in listing if f.endswith(".index")] == ["chief/ckpt-1.index"], f"{listing}")
    check(not [f for f in listing if f.startswith("workertemp_")], f"left: {listing}")

    state = make_state()  # a fresh job
    with mpickpt.TrainingState(d, state) as ts:
        info = ts.restore()
        check(info is not None and info["epoch"] == 2 and info["end_of_epoch"], f"{info}")
        expect(state, 1, "end-of-epoch backup")
        check(starts(ts, "after epoch 2") == (3, 1), f"{starts(ts, 'after epoch 2')}")
        fill(state, 2)
        ts.back_up(5, step=123)  # inside epoch 5
    pc.comm.Barrier()
    indexes = [f for f in files_in(d) if f.endswith(".index")]
    check(indexes == ["chief/ckpt-2.index"], f"one backup kept: {indexes}")

    state = make_state()
    with mpickpt.TrainingState(d, state) as ts:
        info = ts.restore()
        check(info["epoch"] == 5 and info["step"] == 123 and not info["end_of_epoch"], f"{info}")
        expect(state, 2, "mid-epoch backup")
        check(starts(ts, "in epoch 5") == (5, 124), f"{starts(ts, 'in epoch 5')}")
        ts.delete_backup()
        pc.comm.Barrier()
        check(not os.path.exists(d), f"delete_backup left {d}: {files_in(d)}")

    # async: back_up returns at once, the state may change, close() waits
    d2 = pc.outdir("async")
    state = make_state()
    ts = mpickpt.TrainingState(d2, state, async_save=True)
    fill(state, 3)
    ts.back_up(7)
    fill(state, 4)
    ts.close()
    state = make_state()
    with mpickpt.TrainingState(d2, state) as ts:
        ts.restore()
        expect(state, 3, "async backup")
        check(starts(ts, "async") == (8, 1), f"{starts(ts, 'async')}")
    pc.comm.Barrier()
    check(glob.glob(os.path.join(d2, "chief", "*.index")), "the async backup")
    pc.say(f"training state at {size} ranks ok")


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
