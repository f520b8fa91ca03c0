"""mpickpt: checkpoint and restore the state of a distributed training job under MPI.

A thin layer over the C library (a CPython extension, ``mpickpt._mpickpt``): arrays (NumPy arrays,
PyTorch CPU tensors) are saved and restored in place, zero-copy; plain values are stored as JSON,
never pickle; every call is collective over an mpi4py communicator (default ``MPI.COMM_WORLD``) and
raises the same error on every rank. See docs/python.md.

    mgr = mpickpt.CheckpointManager("/scratch/run1", max_to_keep=3)
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "epoch": 0}
    info = mgr.restore_or_initialize(state)         # in place; None when nothing was saved
    ...
    mgr.save(step, state)
"""
from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _mpickpt as _C
from ._mpickpt import (BusyError, CorruptError, Error, ExistsError, FileSystemError,
                       InvalidArgumentError, MismatchError, MPIError, NoSpaceError, NotFoundError,
                       PermissionDeniedError, TimeoutError, VersionError)
from ._state import (Registered, restore_finish, restore_state, save_state,
                     uninterruptible)
from ._tree import RESERVED, PerRank, Shard
from . import preemption

__all__ = [
    "CheckpointManager", "TrainingState", "PerRank", "Shard", "open", "load", "newest",
    "Checkpoint", "export",
    "import_tf",
    "preemption",
    "Error", "NotFoundError", "CorruptError", "MismatchError", "NoSpaceError",
    "InvalidArgumentError", "VersionError", "ExistsError", "TimeoutError", "BusyError", "MPIError",
    "FileSystemError", "PermissionDeniedError",
    "EXIT_PREEMPTED", "__version__", "set_log_level",
]

__version__ = _C.version()
EXIT_PREEMPTED = _C.EXIT_PREEMPTED

_LOG_LEVELS = {"error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}


def set_log_level(level: str) -> None:
    """The level of the library's messages on stderr ("error", "warn", "info" or "debug") when
    MPICKPT_LOG is unset (MPICKPT_LOG wins). The package's default is "info": the chief prints one
    summary line per save and per restore (docs/operations.md, "Summary lines")."""
    if level not in _LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of error, warn, info, debug")
    _C.log_default_level(_LOG_LEVELS[level])


# The summary lines are on by default in Python, as in the programs (the C library alone is quiet).
set_log_level("info")

_LAYOUTS = {None: _C.LAYOUT_DEFAULT, "per-rank": _C.LAYOUT_PER_RANK, "shared": _C.LAYOUT_SHARED,
            "per-node": _C.LAYOUT_PER_NODE}

# Savers still open at exit are closed (an async save in flight is waited for) before mpi4py
# finalizes MPI: the handler is registered after mpi4py.MPI was imported, so it runs first.
_open = weakref.WeakSet()
_exit_hook = False


def _close_all() -> None:
    for obj in list(_open):
        try:
            obj.close()
        except Error:
            pass


def _comm_of(comm: Any) -> Any:
    """The caller's communicator (default MPI.COMM_WORLD), duplicated for mpickpt's own use."""
    global _exit_hook
    from mpi4py import MPI

    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, not {type(comm).__name__}")
    if not _exit_hook:
        atexit.register(_close_all)
        _exit_hook = True
    return comm.Dup()


def _lock_wait(lock_wait: Optional[float]) -> float:
    """The C option lock_wait_seconds: None leaves MPICKPT_LOCK_WAIT in charge (0.0), 0 or less
    never waits (-1.0)."""
    if lock_wait is None:
        return 0.0
    w = float(lock_wait)
    if w != w:
        raise InvalidArgumentError("lock_wait is NaN")
    return w if w > 0 else -1.0


def _layout(layout: Optional[str]) -> int:
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(f"layout {layout!r}: use None, 'per-rank', 'shared' or 'per-node'")
    return _LAYOUTS[layout]


class _Base:
    """A saver with a registered state over a directory; closed at exit at the latest."""

    def __init__(self, directory: str, lock_wait: Optional[float], comm: Any, async_save: bool,
                 layout: Optional[str], skip_missing_per_rank: bool,
                 check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        self._wait = _lock_wait(lock_wait)  # the C option lock_wait_seconds
        self._saver = None
        self._reg = Registered()
        self._aliased = False  # this rank's state of the last restore has aliases (restore_state)
        self._skip = bool(skip_missing_per_rank)
        code = _layout(layout)
        if check_replicas not in (None, "first", "every", "off"):
            raise InvalidArgumentError(f"check_replicas {check_replicas!r}: use None, 'first', "
                                       "'every' or 'off'")
        if replica_mismatch not in (None, "error", "warn"):
            raise InvalidArgumentError(f"replica_mismatch {replica_mismatch!r}: use None, "
                                       "'error' or 'warn'")
        self._comm = _comm_of(comm)
        try:
            self._saver = _C.Saver(self._comm, layout=code, async_save=bool(async_save),
                                   check_replicas=check_replicas,
                                   replica_mismatch=replica_mismatch)
        except BaseException:
            self._comm.Free()
            raise
        _open.add(self)
        self._dir = os.fspath(directory)

    @property
    def comm(self) -> Any:
        """The (duplicated) communicator mpickpt uses."""
        return self._comm

    @uninterruptible
    def wait_until_finished(self) -> None:
        """Waits for an async save in flight; raises its failure (on every rank)."""
        self._saver.sync()

    def reached_preemption(self, step: Optional[int] = None) -> bool:
        """Collective: True on every rank when a preemption signal or the deadline arrived
        (install handlers first: mpickpt.preemption.install())."""
        return preemption.reached_preemption(step, self._comm)

    def _finish(self, info: Dict[str, Any], strict: bool) -> Dict[str, Any]:
        """Collective, after the C restore: the plain values put back (restore_finish), and
        info's 'missing' and 'unexpected' lists: the tensors' (from C, before any data was read;
        the record of plain values left out) and the plain values'."""
        # the state's aliases are not registered: C calls them unexpected where the checkpoint
        # stored them as tensors (restore_finish reads them apart); C compared the names itself
        # unless some rank's state has aliases (restore_state: lenient), then restore_finish
        # compares them with every rank's
        shared = {leaf.name for leaf in self._reg.leaves if leaf.alias is not None}
        tensors = [n for n in info.get("missing", []) if not n.startswith(RESERVED + "/")]
        extra = [n for n in info.get("unexpected", []) if n not in shared]
        arrays = (tensors, extra, self._aliased) if strict else None
        miss, unexp = restore_finish(self._comm, self._reg, self._saver, self._skip,
                                     info["prefix"], strict=strict, arrays=arrays)
        info["missing"] = sorted(set(tensors) | set(miss))
        info["unexpected"] = sorted(set(extra) | set(unexp))
        return info

    def _close(self, inner: Any) -> None:
        if self._saver is None:
            return
        try:
            if inner is not None:
                inner.close()
            self._saver.close()
        finally:
            self._saver = None
            _open.discard(self)
            self._comm.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class CheckpointManager(_Base):
    """Numbered checkpoints of a state tree in `directory` (``<directory>/ckpt-<N>``), like
    TensorFlow's and Orbax's CheckpointManager. Collective over `comm`.

    max_to_keep: newest checkpoints kept (None or <= 0: all); keep_every_n_hours: also keep one
    per this many hours; async_save: save() returns once the arrays are copied, a background
    thread writes; layout: None (per-rank on one node, per-node across nodes; MPICKPT_LAYOUT),
    'per-rank', 'per-node' or 'shared' (one HDF5 file); skip_missing_per_rank: restoring on more
    ranks than wrote, leave the extra ranks' PerRank values as they are.

    Storage levels (docs/levels.md): cache_dir, a node-local directory ('%n': the node's index,
    e.g. '/dev/shm/ckpt/%n'), makes checkpoints go to the nodes' caches, and every
    persist_every-th (default 10) also to `directory`; redundancy='partner' copies each node's
    files to a partner node (in another failure_group, e.g. a rack name); cache_max_to_keep
    (default 2) is the cache's retention. Unset, MPICKPT_CACHE_DIR and its family decide.

    One job at a time uses a directory: its lock is held from here until close(); another job
    holding it is BusyError on every rank naming that job (host, pid, since when), unless it ends
    within lock_wait seconds (None: MPICKPT_LOCK_WAIT, else no wait).

    The replica check (docs/python.md): check_replicas 'first' (the default: at the first save
    of the same arrays), 'every' or 'off' compares every rank's copy of each replicated array;
    copies that differ are a MismatchError at save() naming the arrays and the ranks
    (replica_mismatch='error', the default) or a warning ('warn'). None: MPICKPT_CHECK_REPLICAS,
    MPICKPT_REPLICA_MISMATCH. Restores are strict by default (restore(strict=...))."""

    @uninterruptible
    def __init__(self, directory: str, comm: Any = None, max_to_keep: Optional[int] = 5,
                 keep_every_n_hours: Optional[float] = None, async_save: bool = False,
                 layout: Optional[str] = None, skip_missing_per_rank: bool = False,
                 name: str = "ckpt", cache_dir: Optional[str] = None,
                 redundancy: Optional[str] = None, persist_every: Optional[int] = None,
                 cache_max_to_keep: Optional[int] = None,
                 failure_group: Optional[str] = None,
                 lock_wait: Optional[float] = None, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        super().__init__(directory, lock_wait, comm, async_save, layout, skip_missing_per_rank,
                         check_replicas, replica_mismatch)
        try:
            levels: Dict[str, Any] = {}
            if cache_dir:
                levels["cache_dir"] = os.fspath(cache_dir)
            self._mgr = _C.Manager(self._saver, self._dir,
                                   max_to_keep=max_to_keep if max_to_keep else 0,
                                   keep_every_n_hours=keep_every_n_hours or 0.0, name=name,
                                   skip_missing_per_rank=self._skip,
                                   redundancy=redundancy, persist_every=persist_every or 0,
                                   cache_max_to_keep=cache_max_to_keep or 0,
                                   failure_group=failure_group, lock_wait=self._wait, **levels)
        except BaseException:
            self._close(None)
            raise

    @property
    def directory(self) -> str:
        return self._dir

    @uninterruptible
    def save(self, step: int, state: Mapping[str, Any], epoch: Optional[int] = None,
             end_of_epoch: bool = False, force: bool = False) -> Optional[str]:
        """Saves `state` as the next checkpoint; returns its path. Collective. With async_save
        it returns once the arrays are copied (the state may change at once); a failure of the
        background write is raised by the next call, on every rank."""
        return save_state(self._comm, self._reg, self._saver, state,
                          lambda error, check: self._mgr.save(
                              epoch=int(epoch or 0), step=int(step),
                              end_of_epoch=bool(end_of_epoch), force=bool(force), error=error,
                              check=check))

    def _candidate(self, step: Optional[int]) -> Optional[str]:
        """The checkpoint a restore reads unless it is damaged (the pinned or newest restorable
        one, or the newest of `step`), for restore_state to read its aliases; None when there
        is none here (restore then says so) or it is only in the nodes' caches."""
        try:
            r = self._mgr.restorable()
        except Error:
            return None
        entries = r["entries"]
        if step is not None:
            e = next((e for e in reversed(entries) if e["step"] == int(step)), None)
        else:
            e = None if r["start"] is None else entries[r["start"]]
        if e is None or "persistent" not in e["levels"]:
            return None
        return os.path.join(self._dir, e["prefix"])

    def _entries(self) -> List[Dict[str, Any]]:
        return self._mgr.state()["entries"]

    def all_steps(self) -> List[int]:
        """The steps restore(step=...) accepts, oldest first: the kept checkpoints that no
        `mpickpt drop` retired, no `mpickpt pin` set aside, and that are on a level this manager
        reads (one only in the nodes' caches is not, without cache_dir). Those older than a pin
        are listed: restore() does not fall back to them, restore(step=...) restores them. The C
        manager decides (ckpt_manager_restorable)."""
        return [e["step"] for e in self._mgr.restorable()["entries"]]

    def latest_step(self) -> Optional[int]:
        """The step of the checkpoint restore() starts from (the newest restorable one, or the
        pinned one: `mpickpt pin`), or None."""
        r = self._mgr.restorable()
        return None if r["start"] is None else r["entries"][r["start"]]["step"]

    @uninterruptible
    def restore(self, state: Mapping[str, Any], step: Optional[int] = None,
                strict: bool = True) -> Dict[str, Any]:
        """Restores into `state` in place: the newest valid checkpoint (damaged ones are skipped
        with a warning, and counted in info['skipped']) or the one of `step` (one of
        all_steps(); a dropped, set-aside or damaged one is an error naming it, never a fall back
        to another). Returns info (prefix, step, epoch, world_size, ..., 'missing' and
        'unexpected': names as in the checkpoint). NotFoundError when there is none.

        strict (the default): an entry of the state the checkpoint lacks, or one of the
        checkpoint the state lacks, is a MismatchError on every rank listing them all, like
        load_state_dict. Tensors are compared before any is read, plain values after the tensors
        were read: one error lists the tensors' mismatches, or else the plain values'. With
        strict=False what matches is restored, the rest left as it is, and info lists the
        'missing' and 'unexpected' names. Collective."""
        def call(error: Any, check: int, lenient: bool) -> Dict[str, Any]:
            if step is not None:
                return self._mgr.restore(step=int(step), strict=bool(strict), error=error,
                                         check=check, lenient=lenient)
            return self._mgr.restore_or_initialize(strict=bool(strict), error=error, check=check,
                                                   lenient=lenient)

        info, self._aliased = restore_state(self._comm, self._reg, self._saver, state,
                                            self._candidate(step), call)
        if step is None:
            if not info["restored"]:
                err = NotFoundError(f"no valid checkpoint in {self._dir} ({info['skipped']} "
                                    "damaged)")
                err.reason = NotFoundError.NO_CHECKPOINT
                raise err
        return self._finish(info, bool(strict))

    @uninterruptible
    def restore_or_initialize(self, state: Mapping[str, Any],
                              strict: bool = True) -> Optional[Dict[str, Any]]:
        """restore(state, strict=strict), or None when there is nothing to restore: the caller
        initializes (every array of the state: a damaged checkpoint may have left values in
        them)."""
        info, self._aliased = restore_state(
            self._comm, self._reg, self._saver, state, self._candidate(None),
            lambda error, check, lenient: self._mgr.restore_or_initialize(
                strict=bool(strict), error=error, check=check, lenient=lenient))
        if not info["restored"]:
            return None
        return self._finish(info, bool(strict))

    @uninterruptible
    def close(self) -> None:
        """Waits for a save in flight, then frees everything. Collective."""
        if self._saver is not None:
            self._close(self._mgr)
            self._mgr = None


class TrainingState(_Base):
    """The worker training state of TensorFlow's BackupAndRestore: backups of `state` in
    ``<directory>/chief`` (in-flight parts of other ranks in ``workertemp_<rank>``), one kept; the
    chief's epoch and step broadcast at restore. Collective over `comm`. Holds the lock of
    ``<directory>/chief`` until close() (lock_wait: as CheckpointManager's)."""

    @uninterruptible
    def __init__(self, directory: str, state: Mapping[str, Any], comm: Any = None,
                 async_save: bool = False, layout: Optional[str] = None,
                 skip_missing_per_rank: bool = False,
                 lock_wait: Optional[float] = None, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        super().__init__(directory, lock_wait, comm, async_save, layout, skip_missing_per_rank,
                         check_replicas, replica_mismatch)
        self._state = state
        try:
            self._t = _C.Training(self._saver, self._dir, skip_missing_per_rank=self._skip,
                                  lock_wait=self._wait)
        except BaseException:
            self._close(None)
            raise

    @uninterruptible
    def back_up(self, epoch: int, step: Optional[int] = None) -> None:
        """Backs up the state: at the end of `epoch`, or inside it at `step`. Collective."""
        save_state(self._comm, self._reg, self._saver, self._state,
                   lambda error, check: self._t.back_up(int(epoch), int(step or 0), step is None,
                                                        error=error, check=check))

    @uninterruptible
    def restore(self, strict: bool = True) -> Optional[Dict[str, Any]]:
        """Restores the backup into the state in place; None when there is none. strict: as
        CheckpointManager.restore's. Collective."""
        info, self._aliased = restore_state(
            self._comm, self._reg, self._saver, self._state, self._candidate(),
            lambda error, check, lenient: self._t.restore(strict=bool(strict), error=error,
                                                          check=check, lenient=lenient))
        if not info["restored"]:
            return None
        return self._finish(info, bool(strict))

    def _candidate(self) -> Optional[str]:
        """The backup a restore reads (the newest kept one, in <directory>/chief), for
        restore_state to read its aliases as CheckpointManager's restore does; None when there
        is none (the restore says so)."""
        try:
            entries = self._t.state()["entries"]
        except Error:
            return None
        if not entries or "persistent" not in entries[-1]["levels"]:
            return None
        return os.path.join(self._dir, "chief", entries[-1]["prefix"])

    @property
    def initial_epoch(self) -> int:
        """The epoch to start at: the backup's + 1 (end of epoch) or the backup's (mid-epoch)."""
        return self._t.initial_epoch(0)

    @property
    def initial_step(self) -> int:
        """The step to start at: the backup's + 1, or 0."""
        return self._t.initial_step(0)

    @uninterruptible
    def delete_backup(self) -> None:
        """Removes the backup directory (training finished). Collective."""
        self._t.delete_backup()

    @uninterruptible
    def close(self) -> None:
        if self._saver is not None:
            self._close(self._t)
            self._t = None


from ._read import Array, Checkpoint, load, newest, open  # noqa: E402,F401 - the API


# ---- export to other formats, without MPI (docs/interop.md) ------------------------------------

_EXPORT_SUFFIXES = {".h5": "hdf5", ".hdf5": "hdf5", ".he5": "hdf5", ".safetensors": "safetensors"}


def export(prefix: str, out: str, format: Optional[str] = None,  # noqa: A002 - the CLI's word
           overwrite: bool = False, only: Union[None, str, Sequence[str]] = None,
           strip_prefix: Optional[str] = None) -> Dict[str, Any]:
    """Writes the checkpoint at `prefix` as `format`: "hdf5" (one HDF5 file, a dataset per
    tensor, groups from '/' in names), "safetensors" (one file) or "tf" (a TensorFlow bundle:
    `out` is its prefix). Without `format`, `out` ending in .h5, .hdf5 or .he5 means hdf5 and
    .safetensors means safetensors. The output appears whole or not at all; an existing one is
    ExistsError unless `overwrite`. Returns {"tensors": count, "bytes": of values, "files":
    [paths written]}. Like `mpickpt export`; no MPI.

    `only` (a name prefix or several) writes only the tensors whose names start with one of them,
    never mpickpt's own "__mpickpt__/" blobs (without it every tensor is written, the blobs
    included); `strip_prefix` is removed from every written name (each must start with it):
    ``export(p, "model.safetensors", only="model/", strip_prefix="model/")`` writes a file that
    ``model.load_state_dict`` takes. Tied weights the package stored once (record version 2) are
    written once, the alias recorded in the file's metadata "mpickpt_aliases" (docs/interop.md).
    No tensor selected is NotFoundError."""
    out = os.fspath(out)
    if format is None:
        format = next((f for s, f in _EXPORT_SUFFIXES.items() if out.endswith(s) and out != s),
                      None)
        if format is None:
            raise InvalidArgumentError(
                f"cannot tell the format from {out!r}: pass format='tf', 'hdf5' or "
                "'safetensors' (a name ending in .h5, .hdf5, .he5 or .safetensors implies hdf5 or "
                "safetensors)")
    prefixes = None
    if only is not None:
        prefixes = (only,) if isinstance(only, str) else tuple(only)
        if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
            raise InvalidArgumentError(f"only: one or more non-empty name prefixes, not {only!r}")
    if strip_prefix is not None and (not isinstance(strip_prefix, str) or not strip_prefix):
        raise InvalidArgumentError(f"strip_prefix: a non-empty str, not {strip_prefix!r}")
    return _C.export(os.fspath(prefix), out, format, overwrite=bool(overwrite), only=prefixes,
                     strip_prefix=strip_prefix)


def import_tf(tf_prefix: str, out_prefix: str, skip_unsupported: bool = False,
              overwrite: bool = False, save_counter: int = 0, epoch: int = 0,
              step: int = 0) -> Dict[str, Any]:
    """Reads the TensorFlow checkpoint (tensor bundle) at `tf_prefix` (or the one a directory's
    TensorFlow `checkpoint` file names) and writes the mpickpt checkpoint `out_prefix`, every
    block and tensor checksum checked; keys become tensor names, partitioned variables
    partitioned tensors. Tensors of dtypes mpickpt lacks (strings: every TensorFlow 2 checkpoint
    has `_CHECKPOINTABLE_OBJECT_GRAPH`) raise InvalidArgumentError naming the key, or are left
    out with `skip_unsupported`. Returns {"tensors", "bytes", "skipped": [{"name", "dtype",
    "reason"}]}. Like `mpickpt import-tf`; no MPI. Read the result with mpickpt.open()."""
    return _C.import_tf(os.fspath(tf_prefix), os.fspath(out_prefix),
                        skip_unsupported=bool(skip_unsupported), overwrite=bool(overwrite),
                        save_counter=int(save_counter), epoch=int(epoch), step=int(step))
