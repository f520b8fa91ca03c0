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
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _mpickpt as _C
from ._mpickpt import (BusyError, CorruptError, Error, ExistsError, FileSystemError,
                       InvalidArgumentError, MismatchError, MPIError, NoSpaceError, NotFoundError,
                       PermissionDeniedError, TimeoutError, VersionError)
from ._state import (Registered, agree, collective, load_record, mismatch_message, restore_finish,
                     restore_prepare, save_prepare, uninterruptible)
from ._tree import CODE_NAMES, CODE_NUMPY, JSON_BLOB, RESERVED, PerRank, Shard, alias_view, unescape
from . import _tree, preemption

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
    """A saver with a registered state; closed at exit at the latest."""

    def __init__(self, comm: Any, async_save: bool, layout: Optional[str],
                 skip_missing_per_rank: bool, check_replicas: Optional[str] = None,
                 replica_mismatch: Optional[str] = None) -> None:
        self._saver = None
        self._reg = Registered()
        self._aliased = False  # the state of the last restore has aliases (on some rank)
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
        # unless the state has aliases (_c_strict), then the comparison is made here
        shared = {leaf.name for leaf in self._reg.leaves if leaf.alias is not None}
        tensors = [n for n in info.get("missing", []) if not n.startswith(RESERVED + "/")]
        extra = [n for n in info.get("unexpected", []) if n not in shared]
        if strict and self._aliased:  # the same on every rank (_c_strict)
            every = self._comm.allgather((tensors, extra))
            t_miss = sorted(set().union(*(m for m, _ in every)))
            t_extra = sorted(set().union(*(u for _, u in every)))
            if t_miss or t_extra:
                raise MismatchError(mismatch_message(info["prefix"], t_miss, t_extra, "arrays"))
        miss, unexp = restore_finish(self._comm, self._reg, self._saver, self._skip,
                                     info["prefix"], strict=strict)
        info["missing"] = sorted(set(tensors) | set(miss))
        info["unexpected"] = sorted(set(extra) | set(unexp))
        return info

    def _c_strict(self, strict: bool) -> bool:
        """Whether C compares the names before reading: not when the state has aliases (leaves
        sharing another's memory, not registered), which C would call unexpected where the
        checkpoint stored them as tensors; _finish compares them then."""
        from mpi4py import MPI

        # agreed: PerRank aliases may differ by rank, and every rank must take the same path
        self._aliased = bool(self._comm.allreduce(
            any(leaf.alias is not None for leaf in self._reg.leaves), op=MPI.LOR))
        return bool(strict) and not self._aliased

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
        wait = _lock_wait(lock_wait)
        super().__init__(comm, async_save, layout, skip_missing_per_rank, check_replicas,
                         replica_mismatch)
        self._dir = os.fspath(directory)
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
                                   failure_group=failure_group, lock_wait=wait, **levels)
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
        save_prepare(self._comm, self._reg, self._saver, state)
        return self._mgr.save(epoch=int(epoch or 0), step=int(step),
                              end_of_epoch=bool(end_of_epoch), force=bool(force))

    def _candidate(self, step: Optional[int]) -> Optional[str]:
        """The checkpoint a restore reads unless it is damaged (the pinned or newest restorable
        one, or the newest of `step`), for restore_prepare to read its aliases; None when there
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
        restore_prepare(self._comm, self._reg, self._saver, state, self._candidate(step))
        if step is not None:
            info = self._mgr.restore(step=int(step), strict=self._c_strict(strict))
        else:
            info = self._mgr.restore_or_initialize(strict=self._c_strict(strict))
            if not info["restored"]:
                raise NotFoundError(f"no valid checkpoint in {self._dir} ({info['skipped']} "
                                    "damaged)")
        return self._finish(info, bool(strict))

    @uninterruptible
    def restore_or_initialize(self, state: Mapping[str, Any],
                              strict: bool = True) -> Optional[Dict[str, Any]]:
        """restore(state, strict=strict), or None when there is nothing to restore: the caller
        initializes (every array of the state: a damaged checkpoint may have left values in
        them)."""
        restore_prepare(self._comm, self._reg, self._saver, state, self._candidate(None))
        info = self._mgr.restore_or_initialize(strict=self._c_strict(strict))
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
        wait = _lock_wait(lock_wait)
        super().__init__(comm, async_save, layout, skip_missing_per_rank, check_replicas,
                         replica_mismatch)
        self._dir = os.fspath(directory)
        self._state = state
        try:
            self._t = _C.Training(self._saver, self._dir, skip_missing_per_rank=self._skip,
                                  lock_wait=wait)
        except BaseException:
            self._close(None)
            raise

    @uninterruptible
    def back_up(self, epoch: int, step: Optional[int] = None) -> None:
        """Backs up the state: at the end of `epoch`, or inside it at `step`. Collective."""
        save_prepare(self._comm, self._reg, self._saver, self._state)
        self._t.back_up(int(epoch), int(step or 0), step is None)

    @uninterruptible
    def restore(self, strict: bool = True) -> Optional[Dict[str, Any]]:
        """Restores the backup into the state in place; None when there is none. strict: as
        CheckpointManager.restore's. Collective."""
        restore_prepare(self._comm, self._reg, self._saver, self._state)
        info = self._t.restore(strict=self._c_strict(strict))
        if not info["restored"]:
            return None
        return self._finish(info, bool(strict))

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


# ---- read-only access, without MPI ----------------------------------------------------------------

class Array:
    """A tensor of a checkpoint, read when indexed: ``a[10:20]``, ``a[...]``, ``np.asarray(a)``.
    bfloat16 values come as their uint16 bits (``dtype_name`` says 'bfloat16')."""

    def __init__(self, reader: Any, info: Dict[str, Any]) -> None:
        self._r = reader
        self.name: str = info["name"]
        self.shape: Tuple[int, ...] = tuple(info["shape"])
        self._code: int = info["dtype"]
        self.dtype = CODE_NUMPY[self._code]
        self.dtype_name: str = CODE_NAMES[self._code]
        self.kind: str = info["kind"]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a scalar")
        return self.shape[0]

    def _empty(self, shape: Sequence[int]) -> np.ndarray:
        """An array of `shape` to read into; an InvalidArgumentError naming the tensor when NumPy
        cannot have one (the product of the nonzero extents, in bytes, past the address space:
        a shape such as [0, 2**62, 2**62] holds no element, and still no array has it)."""
        size = self.dtype.itemsize
        for n in shape:
            size *= n or 1
        if size > np.iinfo(np.intp).max:
            raise InvalidArgumentError(
                f"tensor '{self.name}': no NumPy array can have the shape {list(shape)} of "
                f"{self.dtype_name} (its extents other than 0 make {size} bytes, more than "
                f"{np.iinfo(np.intp).max}); index a part of it instead, such as a[:, :2]")
        return np.empty(shape, dtype=self.dtype)

    def read(self) -> np.ndarray:
        out = self._empty(self.shape)
        self._r.read(self.name, out, self._code)
        return out

    def __array__(self, dtype: Any = None) -> np.ndarray:
        a = self.read()
        return a if dtype is None else a.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        box = _box(key, self.shape)
        if box is None:  # steps, fancy indexing: read all, let NumPy index
            return self.read()[key]
        offsets, counts, squeeze = box
        out = self._empty(counts)
        if out.size:
            self._r.read(self.name, out, self._code, offsets, counts)
        return out.reshape([c for c, s in zip(counts, squeeze) if not s])

    def to_torch(self) -> Any:
        """The whole tensor as a PyTorch tensor of its own dtype (bfloat16 included)."""
        import torch

        a = self.read()
        if self.dtype_name == "bfloat16":  # its bits: torch.from_numpy knows int16, not uint16
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    def __repr__(self) -> str:
        return f"<mpickpt.Array {self.name!r} {self.dtype_name}{list(self.shape)}>"


def _box(key: Any, shape: Tuple[int, ...]) -> Optional[Tuple[List[int], List[int], List[bool]]]:
    """Offsets, counts and which axes an int index drops, for basic indexing with step 1."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        return None
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (len(shape) - len(key))
    if len(key) != len(shape):
        raise IndexError(f"{len(key)} indices for a {len(shape)}-d tensor")
    offsets, counts, squeeze = [], [], []
    for k, n in zip(key, shape):
        if isinstance(k, (int, np.integer)):
            i = int(k) + n if int(k) < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"index {int(k)} is out of bounds for an axis of size {n}")
            offsets.append(i), counts.append(1), squeeze.append(True)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                return None
            offsets.append(start), counts.append(max(0, stop - start)), squeeze.append(False)
        else:
            return None
    return offsets, counts, squeeze


class Checkpoint(Mapping[str, Array]):
    """A read-only view of one checkpoint: names to lazily read arrays, ``.meta`` (epoch, step,
    world size, ...), ``.json`` (the plain values the Python package stored). No MPI."""

    def __init__(self, prefix: str) -> None:
        self.prefix = os.fspath(prefix)
        self._r = _C.Reader(self.prefix)
        self.meta: Dict[str, Any] = self._r.header()
        self._arrays = {t["name"]: Array(self._r, t) for t in self._r.tensors()
                        if not t["name"].startswith(RESERVED + "/")}

    def __getitem__(self, name: str) -> Array:
        try:
            return self._arrays[name]
        except KeyError:
            raise NotFoundError(f"no tensor '{name}' in {self.prefix}") from None

    # A missing name raises NotFoundError, which is a LookupError but not the KeyError that
    # Mapping's `in` and get() catch: they answer from the names instead.
    def __contains__(self, name: object) -> bool:
        return name in self._arrays

    def get(self, name: str, default: Any = None) -> Any:
        return self._arrays.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def _json(self, rank: int) -> Optional[Dict[str, Any]]:
        name = f"{JSON_BLOB}/rank_{rank}"
        try:
            info = next(t for t in self._r.tensors() if t["name"] == name)
        except StopIteration:
            return None
        shape = info["shape"]
        if info["dtype"] != _C.UINT8 or len(shape) != 1 or shape[0] > np.iinfo(np.intp).max:
            raise CorruptError(f"{self.prefix}: the record of plain values of rank {rank} "
                               f"('{name}') is {CODE_NAMES.get(info['dtype'], '?')} "
                               f"{list(shape)}, not bytes")
        raw = np.empty(shape[0], dtype=np.uint8)
        self._r.read(name, raw, _C.UINT8)
        return load_record(raw.tobytes(), self.prefix, rank)

    @property
    def json(self) -> Dict[str, Any]:
        """The replicated plain values (as rank 0 wrote them), by name."""
        doc = self._json(0)
        return dict(doc["replicated"]) if doc else {}

    @property
    def aliases(self) -> Dict[str, Dict[str, Any]]:
        """The replicated arrays not stored because they share memory with a stored one (tied
        weights, views; docs/python.md "Shared storage"): name -> {"of": the stored tensor,
        "offset" (bytes), "shape", "strides" (elements), "dtype", "torch"}. Empty for records
        of version 1 and checkpoints without one."""
        doc = self._json(0)
        return dict(doc.get("aliases", {})) if doc else {}

    def json_of_rank(self, rank: int) -> Optional[Dict[str, Any]]:
        """Rank `rank`'s PerRank plain values, or None when the writer had no such rank."""
        doc = self._json(rank)
        return dict(doc["per_rank"]) if doc else None

    def verify(self) -> None:
        """Recomputes every checksum; CorruptError naming the first bad piece."""
        self._r.verify()

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<mpickpt.Checkpoint {self.prefix!r}: {len(self)} tensors, step "
                f"{self.meta['step']}, {self.meta['world_size']} ranks>")


def newest(directory: str) -> str:
    """The prefix of the checkpoint a restore of `directory` starts from: the newest that
    `mpickpt pin` did not set aside, `mpickpt drop` did not retire, that is in the directory (not
    only in the nodes' caches) and whose index and data open; never one older than a pin (the
    pin's error instead, as the restore). Read-only: no lock, no MPI (works while the job that
    owns the directory runs). The C library decides, by the manager's own rule
    (ckpt_newest_restorable). Its checksums are checked when it is read. NotFoundError when there
    is none."""
    return _C.newest(os.fspath(directory))


def _prefix_of(path: str) -> str:
    """A checkpoint prefix, or a checkpoint directory's newest restorable checkpoint."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.exists(path + ".index"):
        return newest(path)
    return path


def open(prefix: str) -> Checkpoint:  # noqa: A001 - the name users know (h5py.File, np.load)
    """A read-only view of the checkpoint at `prefix` (``<dir>/ckpt-3``), or of the newest
    restorable checkpoint of a checkpoint directory (see newest()), without MPI."""
    return Checkpoint(_prefix_of(prefix))


# ---- load without targets ----------------------------------------------------------------------

_KINDS = {"d", "l", "t", "p", "s", "n", "T", "v", "a"}


def _v1_tree(tensors: Dict[str, Dict[str, Any]], replicated: Dict[str, Any],
             per_rank: Optional[Dict[str, Any]], where: str) -> list:
    """The tree of a record of version 1 (or of a checkpoint without one): nested dicts from the
    '/'-joined names (keys unescaped, all str); PerRank around each per-rank leaf."""
    root: Dict[str, Any] = {}
    leaves = []
    for name, t in tensors.items():
        if "/parallel_component_" in name:
            continue
        # a C program's full tensor (one rank wrote it whole) loads whole, as a replicated one
        node = {"replicated": ["n"], "full": ["n"], "component": ["p", ["n"]]}.get(t["kind"])
        if t["kind"] == "partitioned":
            node = ["s", list(t["shape"]), [0] * len(t["shape"])]
        if node is not None:
            leaves.append((name, node))
    leaves += [(n, ["v"]) for n in replicated]
    leaves += [(n, ["p", ["v"]]) for n in (per_rank or {})]
    for name, node in leaves:
        parts = [unescape(p) for p in name.split("/")]
        d = root
        for p in parts[:-1]:
            d = d.setdefault(p, {})
            if not isinstance(d, dict):
                raise CorruptError(f"{where}: '{name}' is inside a leaf")
        if parts[-1] in d:
            raise CorruptError(f"{where}: '{name}' is both a leaf and a subtree")
        d[parts[-1]] = node

    def conv(x: Any) -> list:
        if isinstance(x, dict):
            return ["d", [[k, conv(v)] for k, v in x.items()]]
        return x

    return conv(root)


def _check_tree(node: Any, where: str, depth: int = 0) -> None:
    if not (isinstance(node, list) and node and node[0] in _KINDS) or depth > 200:
        raise CorruptError(f"{where}: the record's tree has a node that is not one: {node!r:.80}")
    k = node[0]
    if k in ("d", "l", "t"):
        if len(node) != 2 or not isinstance(node[1], list):
            raise CorruptError(f"{where}: the record's tree has a bad {k!r} node")
        for item in node[1]:
            if k == "d":
                if not (isinstance(item, list) and len(item) == 2 and
                        type(item[0]) in (str, int)):
                    raise CorruptError(f"{where}: the record's tree has a bad dict item")
                item = item[1]
            _check_tree(item, where, depth + 1)
    elif k == "p":
        if len(node) != 2:
            raise CorruptError(f"{where}: the record's tree has a bad 'p' node")
        _check_tree(node[1], where, depth + 1)
    elif k == "s":
        if len(node) != 3:
            raise CorruptError(f"{where}: the record's tree has a bad 's' node")


def _even(name: str, shape: Tuple[int, ...], rank: int, size: int):
    if not shape:
        raise InvalidArgumentError(f"tensor '{name}' is 0-d: shard='even' splits axis 0")
    n = shape[0]
    lo, hi = rank * n // size, (rank + 1) * n // size
    return (lo,) + (0,) * (len(shape) - 1), (hi - lo,) + tuple(shape[1:])


def _read_record(reader: Any, rank: int, prefix: str, infos: Dict[str, Any]) -> Optional[dict]:
    name = f"{JSON_BLOB}/rank_{rank}"
    info = infos.get(name)
    if info is None:
        return None
    shape = info["shape"]
    if info["dtype"] != _C.UINT8 or len(shape) != 1:
        raise CorruptError(f"{prefix}: the record of plain values of rank {rank} ('{name}') is "
                           "not bytes")
    raw = np.empty(shape[0], dtype=np.uint8)
    reader.read(name, raw, _C.UINT8)
    return load_record(raw.tobytes(), prefix, rank)


@uninterruptible
def load(path: str, comm: Any = None, *, to: Optional[str] = None, shard: Any = None,
         skip_missing_per_rank: bool = False) -> Dict[str, Any]:
    """Loads a checkpoint without targets: its state as a tree of new arrays (the counterpart of
    torch.load and of DCP's load). Collective over `comm` (default MPI.COMM_WORLD).

    path: a checkpoint prefix, or a checkpoint directory (its newest restorable checkpoint, found
    read-only: see newest()). to: "numpy", "torch", or None (each array as it was saved). shard:
    how Shard leaves come back: None, the whole global array on every rank (a plain array);
    "even", this rank's contiguous block along axis 0, as a Shard (so the tree saves back as it
    was); or a callable (name, global_shape, rank, size) -> (offsets, shape) giving a Shard.
    PerRank subtrees hold this rank's values; a rank the writer did not have is NotFoundError,
    or PerRank(None) with skip_missing_per_rank. Tuples come back as tuples, tied tensors
    (aliases) as views of one array. Every array is read by the C library (any number of ranks,
    checksums checked). Plain values come back as Python values (NumPy scalars as Python's)."""
    if to not in (None, "numpy", "torch"):
        raise InvalidArgumentError(f"to={to!r}: use None, 'numpy' or 'torch'")
    if not (shard is None or shard == "even" or callable(shard)):
        raise InvalidArgumentError(f"shard={shard!r}: use None, 'even' or a callable")
    dup = _comm_of(comm)
    try:
        return _load(dup, path, to, shard, bool(skip_missing_per_rank))
    finally:
        dup.Free()


def _load(comm: Any, path: str, to: Optional[str], shard: Any, skip: bool) -> Dict[str, Any]:
    rank, size = comm.rank, comm.size

    def first() -> Any:
        if rank != 0:
            return None
        prefix = _prefix_of(path)
        r = _C.Reader(prefix)
        try:
            header = r.header()
            infos = {t["name"]: t for t in r.tensors()}
            rec = _read_record(r, 0, prefix, infos)
        finally:
            r.close()
        return prefix, header, infos, rec

    prefix, header, infos, rec0 = comm.bcast(collective(comm, first), root=0)
    writers = int(header["world_size"])
    v2 = rec0 is not None and rec0.get("mpickpt_json", 1) >= 2

    def own() -> Optional[dict]:
        if rank == 0:
            return rec0
        if rank >= writers or rec0 is None:
            return None
        if v2 and not _has_per_rank(rec0["tree"]):
            return None
        r = _C.Reader(prefix)
        try:
            return _read_record(r, rank, prefix, infos)
        finally:
            r.close()

    mine = collective(comm, own)
    missing = rank >= writers

    def build() -> Tuple[Dict[str, Any], List[Tuple[str, Any, int, Any]]]:
        if v2:
            tree = (mine if mine is not None else rec0)["tree"]
        else:
            tree = _v1_tree(infos, rec0["replicated"] if rec0 else {},
                            mine["per_rank"] if mine is not None else None, prefix)
        _check_tree(tree, prefix)
        if tree[0] != "d":
            raise CorruptError(f"{prefix}: the record's tree is not a dict")
        replicated = rec0["replicated"] if rec0 else {}
        own_values = mine["per_rank"] if mine is not None else None
        aliases = dict(rec0.get("aliases", {})) if rec0 else {}
        if mine is not None and mine is not rec0:
            aliases.update(mine.get("aliases", {}))
        arrays: Dict[str, Any] = {}
        regs: List[Tuple[str, Any, int, Any]] = []  # (tensor name, view, code, kind)

        def tensor_info(tname: str) -> Dict[str, Any]:
            info = infos.get(tname)
            if info is None:
                raise NotFoundError(f"tensor '{tname}' is not in {prefix}")
            return info

        def alloc(tname: str, code: int, shape: Sequence[int], as_torch: bool, name: str) -> Any:
            if as_torch:
                torch = _tree._torch_module()
                tdt = {v: k for k, v in _tree._TORCH_CODES.items()}.get(code)
                if tdt is None:
                    raise InvalidArgumentError(f"tensor '{name}': {CODE_NAMES[code]} has no "
                                               "PyTorch dtype mpickpt uses; load it with "
                                               "to='numpy'")
                return torch.empty(tuple(shape), dtype=tdt)
            return np.empty(tuple(shape), dtype=CODE_NUMPY[code])

        def torch_leaf(kind: str) -> bool:
            return to == "torch" or (to is None and kind == "T")

        def visit(node: list, name: str, per_rank: bool) -> Any:
            k = node[0]
            if k == "d":
                out = {}
                for key, child in node[1]:
                    out[key] = visit(child, f"{name}/{_tree._escape(key)}" if name else
                                     _tree._escape(key), per_rank)
                return out
            if k in ("l", "t"):
                items = [visit(c, f"{name}/{i}" if name else str(i), per_rank)
                         for i, c in enumerate(node[1])]
                return tuple(items) if k == "t" else items
            if k == "p":
                if per_rank_missing():
                    return PerRank(None)
                return PerRank(visit(node[1], name, True))
            if k == "v":
                table = own_values if per_rank else replicated
                if table is None or name not in table:
                    raise NotFoundError(f"the plain value '{name}' is not in {prefix}")
                return table[name]
            if k == "a":
                return _Alias(name)
            if k == "s":
                info = tensor_info(name)
                gshape = tuple(info["shape"])
                as_torch = to == "torch"
                if shard is None:
                    offsets, shp = (0,) * len(gshape), gshape
                else:
                    fn = _even if shard == "even" else shard
                    offsets, shp = fn(name, gshape, rank, size)
                    offsets, shp = tuple(int(o) for o in offsets), tuple(int(d) for d in shp)
                a = alloc(name, info["dtype"], shp, as_torch, name)
                view = _tree.array_view(a, name)[0]  # bfloat16 as uint16 bits: the file's code
                regs.append((name, view, info["dtype"], ("slice", gshape, offsets, shp)))
                arrays[name] = a
                return a if shard is None else Shard(a, gshape, offsets)
            # "n" / "T"
            tname = name if not per_rank or rank == 0 else f"{name}/parallel_component_{rank}"
            info = tensor_info(tname)
            a = alloc(tname, info["dtype"], info["shape"], torch_leaf(k), name)
            view, _, shape = _tree.array_view(a, name)
            regs.append((name, view, info["dtype"],
                         ("component" if per_rank else "replicated", shape)))
            arrays[name] = a
            return a

        def per_rank_missing() -> bool:
            if not missing:
                return False
            if skip:
                return True
            raise NotFoundError(f"{prefix} was written by {writers} ranks: rank {rank} has no "
                                "per-rank values in it (load with skip_missing_per_rank=True "
                                "to get PerRank(None))")

        state = visit(tree, "", False)
        state = _resolve_aliases(state, arrays, aliases, prefix)
        return state, regs

    state, regs = collective(comm, build)
    saver = _C.Saver(comm, layout=_C.LAYOUT_DEFAULT, async_save=False)
    try:
        def register() -> None:
            for name, view, code, kind in regs:
                if kind[0] == "slice":
                    saver.add_slice(name, view, code, kind[1], kind[2], kind[3])
                else:
                    saver.add_replicated(name, view, code, kind[1], kind[0] == "component")

        collective(comm, register)
        # not strict: a C program's registered savers (blobs) are in the checkpoint and not
        # loaded; every array registered here comes from the checkpoint's own list, so one it
        # lacks is a damaged record (the same lists on every rank)
        info = saver.restore(prefix, skip_missing_per_rank=skip, strict=False)
        lost = [n for n in info.get("missing", []) if not n.startswith(RESERVED + "/")]
        if lost:
            raise CorruptError(f"{prefix}: the record of plain values names arrays the "
                               f"checkpoint does not hold: {', '.join(map(repr, lost[:8]))}"
                               + (f" and {len(lost) - 8} more" if len(lost) > 8 else ""))
    finally:
        saver.close()
    return state


class _Alias:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _has_per_rank(node: Any) -> bool:
    if not isinstance(node, list) or not node:
        return False
    if node[0] == "p":
        return True
    if node[0] == "d":
        return any(_has_per_rank(item[1]) for item in node[1] if isinstance(item, list) and
                   len(item) == 2)
    if node[0] in ("l", "t"):
        return any(_has_per_rank(c) for c in node[1])
    return False


def _resolve_aliases(node: Any, arrays: Dict[str, Any], aliases: Dict[str, dict],
                     where: str) -> Any:
    """The tree with each alias placeholder replaced by a view of its target's array."""
    if isinstance(node, _Alias):
        a = aliases.get(node.name)
        if a is None or a["of"] not in arrays:
            raise CorruptError(f"{where}: '{node.name}' is an alias of "
                               f"{a['of'] if a else 'nothing'!r}, not of a stored array")
        return alias_view(arrays[a["of"]], a)
    if isinstance(node, dict):
        return {k: _resolve_aliases(v, arrays, aliases, where) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_aliases(v, arrays, aliases, where) for v in node]
    if isinstance(node, tuple):
        return tuple(_resolve_aliases(v, arrays, aliases, where) for v in node)
    if isinstance(node, PerRank):
        node.value = _resolve_aliases(node.value, arrays, aliases, where)
        return node
    return node


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
