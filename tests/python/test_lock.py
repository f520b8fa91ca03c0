"""One job per directory from Python (lib/dirlock.h, docs/python.md): CheckpointManager and
TrainingState hold the directory's lock from creation to close().

- A second CheckpointManager (and TrainingState) on a directory in use, here by this same job,
  is BusyError on every rank with one message naming the directory and the holder (rank 0's
  host and pid, "this process"); the first goes on saving, and its checkpoints restore exactly.
- `mpickpt drop` (rank 0, as an operator would) is refused while the manager is open.
- Every way a manager ends frees the directory: close(), a `with` block left by an exception, a
  manager dropped without close (garbage), TrainingState.close() and delete_backup().
- A holder that is not mpickpt (a plain process taking flock on DIR/lock, as the lock's protocol
  says) makes CheckpointManager fail at once naming its pid; with lock_wait the manager is
  created after that process let go (a marker it writes before it lets go is there by then).
- lock_wait=NaN is InvalidArgumentError on every rank.

Usage: mpirun -np N python3 test_lock.py OUTDIR   (MPICKPT_CLI: the mpickpt program)"""
import gc
import os
import socket
import subprocess
import sys
import time

import mpickpt
import pycheck as pc
from mpickpt import BusyError, InvalidArgumentError
from pycheck import check, expect_error, rank, size

CLI = os.environ["MPICKPT_CLI"]
N = 500


def make_state():
    return pc.shard_state(N)


fill, expect = pc.shard_fill, pc.shard_expect


def restores(d, step, what, **kw):
    state = make_state()
    with mpickpt.CheckpointManager(d, **kw) as mgr:
        info = mgr.restore(state)
        check(info["step"] == step, f"{what}: restored step {info['step']}, expected {step}")
        expect(state, step, what)


def holder_words():
    """rank 0's host and pid, on every rank (the lock's holder when rank 0 holds it)."""
    return pc.comm.bcast((socket.gethostname(), os.getpid()) if rank == 0 else None)


def main():
    d = pc.outdir("mgr")
    host, pid = holder_words()
    state = make_state()
    mgr = mpickpt.CheckpointManager(d, max_to_keep=None)
    for step in (10, 20):
        fill(state, step)
        mgr.save(step, state)
    err = expect_error(BusyError, lambda: mpickpt.CheckpointManager(d), d, "in use by another job",
                       f"host {host}, pid {pid} (this process)", "since ")
    check(err.code == mpickpt.BusyError.code, "BusyError.code")
    # the first manager goes on
    fill(state, 30)
    mgr.save(30, state)
    check(mgr.all_steps() == [10, 20, 30], f"steps {mgr.all_steps()}")
    # an operator's drop is refused while the job holds the directory
    pc.comm.Barrier()
    if rank == 0:
        p = subprocess.run([CLI, "drop", d, "ckpt-1"], capture_output=True, text=True)
        check(p.returncode == 1 and f"pid {pid}," in p.stderr and "in use" in p.stderr,
              f"mpickpt drop while the manager is open: {p.returncode} {p.stderr}")
        check(not os.path.exists(os.path.join(d, "restart")), "the refused drop wrote")
    pc.comm.Barrier()
    mgr.close()
    # close() freed it: the checkpoints restore exactly
    for step in (30,):
        restores(d, step, "after close()")

    # a `with` block left by an exception frees it
    try:
        with mpickpt.CheckpointManager(d):
            raise KeyError("inside the block")
    except KeyError:
        pass
    restores(d, 30, "after a with block that raised")

    # a manager dropped without close() frees it when it is collected
    m = mpickpt.CheckpointManager(d)
    del m
    gc.collect()
    restores(d, 30, "after a manager was dropped")

    # training states: the lock of <work>/chief
    w = pc.outdir("work")
    tstate = make_state()
    t = mpickpt.TrainingState(w, tstate)
    fill(tstate, 7)
    t.back_up(0, 7)
    expect_error(BusyError, lambda: mpickpt.TrainingState(w, make_state()),
                 os.path.join(w, "chief"), f"pid {pid} (this process)")
    t.close()
    t = mpickpt.TrainingState(w, tstate)
    check(t.restore()["step"] == 7, "the training state after close()")
    expect(tstate, 7, "training state")
    t.delete_backup()
    t.close()
    pc.comm.Barrier()
    check(not os.path.exists(w), f"{w} still exists after delete_backup")
    t = mpickpt.TrainingState(w, make_state())  # free and fresh
    check(t.restore() is None, "a fresh training state after delete_backup")
    t.close()

    # a holder that is not mpickpt: flock on DIR/lock, as docs/operations.md describes the lock
    sync = pc.outdir("sync")
    holder = None
    if rank == 0:
        os.makedirs(sync, exist_ok=True)
        code = (
            "import fcntl, os, socket, sys, time\n"
            "d, sync = sys.argv[1], sys.argv[2]\n"
            "fd = os.open(os.path.join(d, 'lock'), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "rec = f'host={socket.gethostname()} pid={os.getpid()} since={int(time.time())}\\n'\n"
            "os.pwrite(fd, rec.encode(), 0); os.ftruncate(fd, len(rec))\n"
            "open(os.path.join(sync, 'ready'), 'w').close()\n"
            "while not os.path.exists(os.path.join(sync, 'go')):\n"
            "    time.sleep(0.02)\n"
            "open(os.path.join(sync, 'released'), 'w').close()\n"
            "os.close(fd)\n")
        holder = subprocess.Popen([sys.executable, "-c", code, d, sync])
        while not os.path.exists(os.path.join(sync, "ready")):
            check(holder.poll() is None, f"the holder ended: {holder.returncode}")
            time.sleep(0.02)
    hpid = pc.comm.bcast(holder.pid if rank == 0 else None)
    expect_error(BusyError, lambda: mpickpt.CheckpointManager(d, lock_wait=0), d,
                 f"pid {hpid},")
    expect_error(InvalidArgumentError,
                 lambda: mpickpt.CheckpointManager(d, lock_wait=float("nan")), "lock_wait")
    if rank == 0:
        open(os.path.join(sync, "go"), "w").close()
    with mpickpt.CheckpointManager(d, lock_wait=300) as mgr:
        if rank == 0:
            check(os.path.exists(os.path.join(sync, "released")),
                  "the manager was created before the holder let go")
            check(holder.wait(timeout=60) == 0, f"the holder: exit {holder.returncode}")
        state = make_state()
        check(mgr.restore(state)["step"] == 30, "restore after the wait")
        expect(state, 30, "after the wait")
    pc.say(f"test_lock: {size} ranks: ok")


if __name__ == "__main__":
    main()
