"""A KeyboardInterrupt never tears a checkpoint, nor leaves the other ranks waiting.

SIGINT arrives while a collective call runs: from a threading.Timer (signal.raise_signal) started
once the C save of a large state (200 MB in all: 200 MB per rank at 1 rank, 50 MB at 4) began,
or on one rank only at fixed points of the Python layer around the C calls (before the ranks
agree on the state, just before the C save, during a restore). Whichever way it lands, the save
either completed (the index exists, verify() passes, the values are the saved ones) or was never
committed (no index, no data files), every rank agrees which, the signalled ranks get their
KeyboardInterrupt once the call returns, and the manager still works afterwards. The delay only
starts the interrupt: nothing is asserted about time.

Usage: mpirun -np N python3 test_interrupt.py OUTDIR"""
import glob
import os
import signal
import threading

import numpy as np

import pycheck as pc
from pycheck import check, check_bits, rank, size

import mpickpt

TOTAL = 200 * 1000 * 1000 // 4  # float32 elements in all


class Proxy:
    """Forwards to `inner`, except the methods given (which call `inner`'s themselves)."""

    def __init__(self, inner, **methods):
        self._inner = inner
        self.__dict__.update(methods)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _tick():
    """A Python call: a pending signal's handler runs at the latest here."""


def make_state(n):
    lo, hi = rank * n // size, (rank + 1) * n // size
    return {"big": mpickpt.Shard(np.empty(hi - lo, np.float32), (n,), (lo,)),
            "small": np.zeros(5), "k": 0}


def fill(state, k):
    local = state["big"].local
    local[:] = k
    local[:: 4096] = np.arange(local[:: 4096].size, dtype=np.float32) + k  # not all equal
    state["small"][:] = k
    state["k"] = k


def judge(d, step, state, k, interrupted, signalled, what):
    """Every rank: the checkpoint of save `step` (ckpt-<step>) is complete with the values of
    fill(k), or absent altogether; the signalled ranks were interrupted."""
    pc.comm.Barrier()
    prefix = os.path.join(d, f"ckpt-{step}")
    committed = pc.same_everywhere(os.path.exists(prefix + ".index"), f"{what}: committed")
    if committed:
        with mpickpt.open(prefix) as ck:
            if rank == 0:
                ck.verify()
            want = make_state(ck["big"].shape[0])
            fill(want, k)
            lo = want["big"].offsets[0]
            got = ck["big"][lo:lo + want["big"].local.size]
            check_bits(got, want["big"].local, f"{what}: this rank's block")
            check_bits(ck["small"].read(), want["small"], f"{what}: small")
            check(ck.json["k"] == k, f"{what}: k {ck.json}")
    else:
        left = glob.glob(prefix + ".*")
        check(not left, f"{what}: not committed, yet {left} exist")
    if signalled:
        check(interrupted, f"{what}: SIGINT arrived, no KeyboardInterrupt was raised")
    everyone = pc.comm.allgather((interrupted, signalled))
    pc.say(f"{what}: {'committed' if committed else 'not committed'}; interrupted ranks "
           f"{[r for r, (i, _) in enumerate(everyone) if i]}")
    return committed


def attempt(call, signal_after=None):
    """Runs call(); True when it raised KeyboardInterrupt. signal_after(): a thread that raises
    SIGINT, joined inside (a pending interrupt surfaces here, not in the checks that follow)."""
    interrupted = False
    timer = None
    try:
        try:
            call()
        finally:
            timer = signal_after() if signal_after else None
            if timer is not None:
                timer.join()
            _tick()
    except KeyboardInterrupt:
        interrupted = True
    if timer is not None:
        timer.join()
    _tick()
    return interrupted


def main():
    d = pc.outdir("run")
    mgr = mpickpt.CheckpointManager(d, max_to_keep=None)
    big = make_state(TOTAL)
    small = make_state(1 << 16)
    step = 0

    # 1. a Timer started once the C save began; every rank
    timers = []

    fired = threading.Event()
    landed = []

    def interrupt():
        fired.set()
        signal.raise_signal(signal.SIGINT)

    def c_save_with_timer(*args, **kw):
        t = threading.Timer(0.05, interrupt)
        t.start()
        timers.append(t)
        out = real_c.save(*args, **kw)
        landed.append("during" if fired.is_set() else "after")  # told, never asserted
        return out

    real_c = mgr._mgr
    mgr._mgr = Proxy(real_c, save=c_save_with_timer)
    step += 1
    fill(big, step)
    hit = attempt(lambda: mgr.save(step, big), lambda: timers[-1])
    mgr._mgr = real_c
    judge(d, step, big, step, hit, True, "timer during the write")
    pc.say(f"  (rank 0: the signal arrived {landed[0]} the C save)")

    # 2. one rank signalled inside the Python layer, before the ranks agree on the state
    real_saver = mgr._saver
    last = size - 1

    def set_blob(*args):
        real_saver.set_blob(*args)
        if rank == last:
            signal.raise_signal(signal.SIGINT)

    mgr._saver = Proxy(real_saver, set_blob=set_blob)
    step += 1
    fill(small, step)
    hit = attempt(lambda: mgr.save(step, small))
    mgr._saver = real_saver
    judge(d, step, small, step, hit, rank == last, f"rank {last} before the agreement")

    # 3. rank 0 signalled just before the C save
    def c_save_signalled(*args, **kw):
        if rank == 0:
            signal.raise_signal(signal.SIGINT)
        return real_c.save(*args, **kw)

    mgr._mgr = Proxy(real_c, save=c_save_signalled)
    step += 1
    fill(small, step)
    hit = attempt(lambda: mgr.save(step, small))
    mgr._mgr = real_c
    judge(d, step, small, step, hit, rank == 0, "rank 0 before the C save")

    # 4. a restore interrupted on the last rank: it completes everywhere, then the interrupt
    def reset_blobs():
        real_saver.reset_blobs()
        if rank == last:
            signal.raise_signal(signal.SIGINT)

    mgr._saver = Proxy(real_saver, reset_blobs=reset_blobs)
    fill(small, -1)
    hit = attempt(lambda: mgr.restore(small))
    mgr._saver = real_saver
    check(hit == (rank == last), f"restore: interrupted {hit}")
    check_bits(small["small"], np.full(5, step, np.float64), "restored after the interrupt")
    check(small["k"] == step, f"k {small['k']}")

    # and the manager still works
    step += 1
    fill(small, step)
    mgr.save(step, small)
    judge(d, step, small, step, False, False, "a save afterwards")
    mgr.close()


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
