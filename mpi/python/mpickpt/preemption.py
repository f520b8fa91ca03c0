"""Preemption: Slurm (``--signal``, ``scancel --signal``), a deadline or a halt request
(``mpickpt halt DIR``) asks the job to stop; every rank takes the same final checkpoint and the job
exits with EXIT_CODE, on which mpickpt-run requeues it under Slurm, or stops for good after a halt
(jobs/slurm/, docs/operations.md).

    mpickpt.preemption.install()                  # SIGTERM and SIGUSR1 set a flag
    for step in range(start, steps):
        ...
        if mpickpt.preemption.reached_preemption(step):   # collective
            mgr.save(step, state, force=True)
            mgr.close()
            mpickpt.preemption.exit()                   # 75, clean under python -m mpi4py too
"""
from __future__ import annotations

import atexit
import sys
from typing import Any, NoReturn, Optional, Sequence

from . import _mpickpt as _C

EXIT_CODE = _C.EXIT_PREEMPTED
# What check() returns.
NONE = _C.PREEMPT_NONE
SIGNAL = _C.PREEMPT_SIGNAL
DEADLINE = _C.PREEMPT_DEADLINE
HALT = _C.PREEMPT_HALT


def install(signals: Optional[Sequence[int]] = None, deadline: Optional[float] = None,
            reserve_s: float = 30.0) -> None:
    """Installs handlers for `signals` (default SIGTERM and SIGUSR1) that only set a flag, and
    sets the deadline: `deadline` (seconds since the epoch), else MPICKPT_DEADLINE or Slurm's end
    time when set; the check says "stop" `reserve_s` seconds before it. Local."""
    _C.preempt_install(list(signals) if signals is not None else None)
    _C.preempt_set_deadline(-1.0 if deadline is None else float(deadline), float(reserve_s))


def signalled() -> bool:
    """True when this rank received one of the signals (local; use reached_preemption to act)."""
    return bool(_C.preempt_signalled())


def reached_preemption(step: Optional[int] = None, comm: Any = None) -> bool:
    """Collective over `comm` (default MPI.COMM_WORLD): True on every rank when any rank was
    signalled, a halt request is due or the deadline is near; then take the final checkpoint and exit with EXIT_CODE.
    `step` is for the caller's logs (Orbax's signature)."""
    del step
    return _C.preempt_check(comm) != _C.PREEMPT_NONE


def check(comm: Any = None) -> int:
    """Collective over `comm` (default MPI.COMM_WORLD): why to stop, the same on every rank:
    NONE, SIGNAL, HALT (a due `mpickpt halt DIR` request in a manager's directory) or DEADLINE."""
    return int(_C.preempt_check(comm))


def watch_dir(path: Optional[str]) -> None:
    """Also stop on halt requests in checkpoint directory `path` (CheckpointManager and
    TrainingState watch theirs already); None stops watching every directory. Local."""
    _C.preempt_watch_dir(path)


def reset() -> None:
    """Clears this rank's flag (after a checkpoint that was not final)."""
    _C.preempt_reset()


def _no_abort() -> None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and hasattr(mpi, "_set_abort_status"):
        mpi._set_abort_status(0)


def exit(code: int = EXIT_CODE) -> NoReturn:  # noqa: A001 - sys.exit's name, on purpose
    """Ends the process with exit status `code` (default EXIT_CODE, 75) after the final
    checkpoint, cleanly: checkpoint managers still open are closed first (an async save in
    flight is waited for), and MPI is finalized normally at exit.

    sys.exit(75) alone does the same under ``python script.py``, but under ``python -m mpi4py``
    mpi4py's runner turns a SystemExit with a non-zero code into MPI_Abort(75) at exit: the job
    still ends with 75, after Open MPI's MPI_ABORT banner on stderr, so every preemption looks
    like a crash in the log. This raises SystemExit(code) (finally blocks and atexit handlers
    run; MPI can still be used in them) and resets mpi4py's abort status before mpi4py's exit
    handler runs, which then finalizes MPI instead of aborting. Call it on every rank."""
    from . import _close_all

    _close_all()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit.register(_no_abort)  # runs before mpi4py's own exit handler
    raise SystemExit(int(code))
