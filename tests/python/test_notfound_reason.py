"""NotFoundError.reason (issue 31): which of CKPT_ENOTFOUND's meanings an error is, the same on
every rank, without parsing the message.

Two saves (steps 10, 20). 'no_checkpoint': restore() of an empty directory, restore(step=15)
(the C manager's error); 'no_tensor': a name a checkpoint lacks (mpickpt.open), and one rank's
NotFoundError agreed by the Python layer (_state.agree: the last rank's reason on every rank);
'pinned': a dropped checkpoint asked for by step (`mpickpt drop`), and a pinned checkpoint that
cannot be restored (`mpickpt pin`, then its data file truncated). A NotFoundError made by hand
has reason None (the class's). 'no_metrics' has no Python error (Saver.last_metrics() is None
then): only the constant is checked.

Usage: mpirun -np N python3 test_notfound_reason.py OUTDIR   (MPICKPT_CLI: the mpickpt program)"""
import glob
import os

import pycheck as pc
from pycheck import check, expect_error, rank, size

import mpickpt
from mpickpt import NotFoundError
from mpickpt import _state

N = 1000


def reason_everywhere(err, want, what):
    got = getattr(err, "reason", "<none>")
    everyone = pc.comm.allgather(got)
    check(all(g == want for g in everyone), f"{what}: reasons {everyone}, expected {want!r}")


def main():
    check((NotFoundError.NO_CHECKPOINT, NotFoundError.NO_TENSOR, NotFoundError.PINNED,
           NotFoundError.NO_METRICS) == ("no_checkpoint", "no_tensor", "pinned", "no_metrics"),
          "the reason constants")
    check(NotFoundError.reason is None and NotFoundError("x").reason is None, "default None")
    empty = pc.outdir("empty")
    with mpickpt.CheckpointManager(empty) as mgr:
        err = expect_error(NotFoundError, lambda: mgr.restore(pc.shard_state(N)), "no valid")
    reason_everywhere(err, NotFoundError.NO_CHECKPOINT, "restore of an empty directory")

    d = pc.outdir("mgr")
    state = pc.shard_state(N)
    with mpickpt.CheckpointManager(d, max_to_keep=None) as mgr:
        for step in (10, 20):
            pc.shard_fill(state, step)
            mgr.save(step, state)
        err = expect_error(NotFoundError, lambda: mgr.restore(pc.shard_state(N), step=15),
                           "step 15")
        reason_everywhere(err, NotFoundError.NO_CHECKPOINT, "restore(step=15)")
    pc.comm.Barrier()

    with mpickpt.open(os.path.join(d, "ckpt-1")) as ck:
        try:
            ck["no/such/tensor"]
            check(False, "a missing tensor raised nothing")
        except NotFoundError as e:
            reason_everywhere(e, NotFoundError.NO_TENSOR, "open()[missing]")
    # the Python layer's agreement carries the failing rank's reason
    mine = None
    if rank == size - 1:
        mine = NotFoundError("tensor 'w' is not in here")
        mine.reason = NotFoundError.NO_TENSOR
    err = expect_error(NotFoundError, lambda: _state.agree(pc.comm, mine), "'w'")
    reason_everywhere(err, NotFoundError.NO_TENSOR, "agreed by _state.agree")

    pc.run_cli("drop", d, "ckpt-2")
    with mpickpt.CheckpointManager(d) as mgr:
        err = expect_error(NotFoundError, lambda: mgr.restore(pc.shard_state(N), step=20),
                           "dropped")
    reason_everywhere(err, NotFoundError.PINNED, "a dropped checkpoint")
    pc.run_cli("pin", d, "ckpt-1")
    if rank == 0:
        f = sorted(glob.glob(os.path.join(d, "ckpt-1.data-*")))[0]
        os.truncate(f, os.path.getsize(f) // 2)
    pc.comm.Barrier()
    with mpickpt.CheckpointManager(d) as mgr:
        err = expect_error(NotFoundError, lambda: mgr.restore(pc.shard_state(N)), "pinned")
    reason_everywhere(err, NotFoundError.PINNED, "the pinned checkpoint, damaged")


if __name__ == "__main__":
    main()
    pc.comm.Barrier()
